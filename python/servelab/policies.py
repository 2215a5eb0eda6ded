"""The policy catalogue and policies written in Python.

A Python policy is registered under a name and then named by experiments like a built-in plugin
(``policies: {queue: my-order}`` or ``cluster: {router: my-router}`` in YAML, or the same in a
dict / overrides). While one is active the scheduler's invariants are checked after every step
(every replica's, in a cluster); a policy that raises or returns
something unusable stops the run with PolicyError naming it. Registering a name again replaces
the Python plugin of that name; built-in names are refused.
"""

from . import _servelab


def policies():
    """Every plugin, as `sim policies` lists them: dicts with kind, name, description, origin,
    params (name, type, default, range or choices, doc) and python (registered from Python)."""
    return _servelab.policies()


def policies_text():
    """The catalogue exactly as `sim policies` prints it."""
    return _servelab.policies_text()


def register_queue_order(name, key, params=None, description=""):
    """Registers a queue order (``policies.queue``). key(request) -- or key(request, params)
    when `params` declares parameters ({name: default} or {name: (default, "doc")}; experiments
    set them as ``queue: {name: NAME, p: v}``) -- returns a number or a tuple of numbers; the
    smallest key is admitted first, ties by request id. It is called once when a request
    enters the waiting queue (arrival, or return after a preemption). `request` is a
    servelab.Request, valid only during the call."""
    _servelab.register_queue_order(name, key, params, description)


def register_victim_rule(name, pick, description=""):
    """Registers a preemption victim rule (``policies.preemption: {name: recompute, victim:
    NAME}``). pick(running) gets the running requests (servelab.Request, in the scheduler's
    order) and returns the victim's index; it is called only when a preemption happens."""
    _servelab.register_victim_rule(name, pick, description)


def register_router(name, route, params=None, description=""):
    """Registers a router (``cluster: {router: NAME}``, or ``decode_router``). For each arriving
    request, route(request, replicas) -- or route(request, replicas, params) when `params`
    declares parameters -- returns the index of the chosen replica in `replicas`. `request` is a
    servelab.RouteRequest (id, arrival_ns, prompt_tokens, max_output_tokens, priority, tenant,
    session, n, block_size, block_hashes), `replicas` a list of servelab.ReplicaLoad (replica,
    outstanding, waiting, running, kv_blocks_used, kv_blocks_usable, kv_usage) in cluster order.
    When `route` is a class, each run makes a fresh instance (no arguments) and calls it, so
    state kept in the instance starts anew in every run."""
    _servelab.register_router(name, route, params, description)
