"""The policy catalogue and policies written in Python.

A Python policy is registered under a name and then named by experiments like a built-in plugin
(``policies: {queue: my-order}``, ``policies: {admission: my-rule}`` or
``cluster: {router: my-router}`` in YAML, or the same in a
dict / overrides). While one is active the scheduler's invariants are checked after every step
(every replica's, in a cluster); a policy that raises or returns
something unusable stops the run with PolicyError naming it. Registering a name again replaces
the Python plugin of that name; built-in names are refused.
"""

import inspect

from . import _servelab


def _check_arguments(register, role, fn, names, params, fresh_instance=False):
    """TypeError unless `fn` can be called with the arguments `names` (plus `params` when the
    plugin declares parameters), so a wrong signature is named at registration instead of failing
    every run. With fresh_instance, a class is instantiated without arguments and its instances
    called. Callables whose signature Python cannot inspect are taken as they are."""
    if not callable(fn):
        raise TypeError(f"{register}: {role} must be callable, got {type(fn).__name__}")
    if params is not None:
        names = names + ["params"]
    target, bound = fn, []
    if fresh_instance and inspect.isclass(fn):
        try:
            inspect.signature(fn).bind()
        except TypeError:
            raise TypeError(f"{register}: {role} is a class, so each run makes an instance "
                            f"without arguments; {fn.__name__}() cannot be made") from None
        except ValueError:
            pass
        call = next((vars(k)["__call__"] for k in fn.__mro__
                     if k is not object and "__call__" in vars(k)), None)
        if call is None:
            raise TypeError(f"{register}: {role} is a class without a __call__ method")
        target, bound = call, [None]  # self
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(*bound, *([None] * len(names)))
    except TypeError:
        count = f"{len(names)} argument" + ("" if len(names) == 1 else "s")
        raise TypeError(
            f"{register}: {role} must take {count} ({', '.join(names)}); "
            f"{getattr(fn, '__name__', type(fn).__name__)}{signature} does not") from None


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
    _check_arguments("register_queue_order", "key", key, ["request"], params)
    _servelab.register_queue_order(name, key, params, description)


def register_victim_rule(name, pick, description=""):
    """Registers a preemption victim rule (``policies.preemption: {name: recompute, victim:
    NAME}``). pick(running) gets the running requests (servelab.Request, in the scheduler's
    order) and returns the victim's index; it is called only when a preemption happens."""
    _check_arguments("register_victim_rule", "pick", pick, ["running"], None)
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
    _check_arguments("register_router", "route", route, ["request", "replicas"], params,
                     fresh_instance=True)
    _servelab.register_router(name, route, params, description)


def register_admission(name, admit, params=None, description=""):
    """Registers an admission rule (``policies.admission``): overload control that sheds
    arrivals. For each arriving request the scheduler would queue, admit(request, load) -- or
    admit(request, load, params) when `params` declares parameters -- returns a str: "" admits
    the request, anything else sheds it (status shed) and is its finish reason. `request` is a
    servelab.RouteRequest (a copy of the arriving request's spec), `load` a
    servelab.AdmissionLoad (now_ns, waiting, running, waiting_tokens, prefill_tokens_per_s).
    Like the built-in rules it must be a function of the request and the load only."""
    _check_arguments("register_admission", "admit", admit, ["request", "load"], params)
    _servelab.register_admission(name, admit, params, description)


def register_length_cap(name, cap, params=None, description=""):
    """Registers a length cap (``policies.length_cap``): a brownout lever that lowers an
    arriving request's max_output_tokens. cap(request, load) -- or cap(request, load, params) --
    gets what an admission rule gets (after the admission rule admitted the request) and returns
    an int: request.max_output_tokens leaves it alone, a smaller value >= 1 caps it (finish
    reason "length (capped from N)")."""
    _check_arguments("register_length_cap", "cap", cap, ["request", "load"], params)
    _servelab.register_length_cap(name, cap, params, description)


def register_batch_formation(name, fill, params=None, description="", resumes_swapped=False):
    """Registers a batch formation (``policies.batch``): how each step's batch is formed.
    fill(step) -- or fill(step, params) when `params` declares parameters -- forms the step
    through `step`, a servelab.StepBuilder valid during the call: step.schedule_running(budget,
    tokens_for, stop_at_self_preemption=False), step.swap_in(budget) and
    step.admit_waiting(budget, token_cap=0, whole_prompt=False, watermark=None,
    reserve_max_length=False, max_admissions=0) each return the budget left; step.admit,
    step.budget_left, step.num_running, step.num_waiting, step.num_swapped, step.num_preempted,
    step.max_num_batched_tokens, step.max_num_seqs, step.now_ns and step.running() describe the
    step. tokens_for(request, budget_left) returns the tokens to schedule for a running request
    (<= 0 skips it). With resumes_swapped=True the formation may run with swap preemption (it
    should then call swap_in). docs/python.md has the whole contract."""
    _check_arguments("register_batch_formation", "fill", fill, ["step"], params)
    _servelab.register_batch_formation(name, fill, params, description, resumes_swapped)
