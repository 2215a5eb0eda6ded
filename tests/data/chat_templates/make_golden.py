#!/usr/bin/env python3
"""Writes golden.json: what Python's Jinja2 renders, in the environment transformers renders chat
templates in, for the templates of this folder and for short expression templates. The C++ test
(tests/jinja_test.cc) renders the same cases with serving/jinja.h and compares byte for byte.

  python3 tests/data/chat_templates/make_golden.py            # rewrite golden.json
  python3 tests/data/chat_templates/make_golden.py --check    # exit 1 if golden.json differs

The environment (as transformers' chat template utilities set it up): an
ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and loop controls; a tojson filter
that does not escape HTML (json.dumps with ensure_ascii=False and an optional indent); the globals
raise_exception and strftime_now (here on a fixed clock, NOW, in UTC); a {% generation %} tag
that renders its body. continue_final_message cuts the text as transformers does.
"""
import argparse
import copy
import datetime
import json
import os
import random
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
NOW = 1764849600  # 2025-12-04 12:00:00 UTC


class Generation(jinja2.ext.Extension):
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def environment():
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[Generation, jinja2.ext.loopcontrols])

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def strftime_now(fmt):
        return datetime.datetime.fromtimestamp(NOW, datetime.timezone.utc).strftime(fmt)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


LLAMA_TOKENS = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
GEMMA_TOKENS = {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"}
L3_TOKENS = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}

SYSTEM = {"role": "system", "content": "You are terse.\n"}
U1 = {"role": "user", "content": "Hi there, what is paging?"}
A1 = {"role": "assistant", "content": "  Fixed-size KV blocks.  "}
U2 = {"role": "user", "content": "And \"chunked\" prefill? 😀"}
A_OPEN = {"role": "assistant", "content": "It splits a long prompt "}

CONVERSATIONS = {
    "one_user": [U1],
    "system_user": [SYSTEM, U1],
    "three_turns": [U1, A1, U2],
    "system_three_turns": [SYSTEM, U1, A1, U2],
    "open_assistant": [SYSTEM, U1, A1, U2, A_OPEN],
}

TEMPLATES = {
    "llama2.jinja": (LLAMA_TOKENS, {}),
    "mistral.jinja": (LLAMA_TOKENS, {}),
    "chatml_default_system.jinja": ({}, {}),
    "llama3_dated.jinja": (L3_TOKENS, {}),
    "gemma.jinja": (GEMMA_TOKENS, {}),
    "kitchen_sink.jinja": ({}, {}),
    # Takes OpenAI's content parts (a loop over a message's content): rendered with each
    # message's content as one text part, as vLLM passes it to such a template.
    "content_parts.jinja": ({}, {}),
}
PARTS_TEMPLATES = {"content_parts.jinja"}

# OpenAI chat requests with tools, rendered as vLLM renders them (vllm_context below): the C++
# side parses the same body with engine/openai_api.h and renders it with the template.
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather now.", "strict": True,
    "parameters": {"type": "object", "required": ["city"],
                   "properties": {"unit": {"enum": ["c", "f"]}, "city": {"type": "string"}}}}}
CLOCK = {"function": {"name": "get_time"}}  # type left out; no description or parameters
TOOL_TURNS = [
    {"role": "user", "content": "Weather and time in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call-1", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"unit\":\"c\",\"city\":\"Paris\"}"}},
        {"id": "call-2", "type": "function", "function": {"name": "get_time", "arguments": ""}}]},
    {"role": "tool", "tool_call_id": "call-1", "content": "18 C, sunny"},
    {"role": "tool", "tool_call_id": "call-2", "content": "14:05"},
]
REQUESTS = [
    ("hermes_tools.jinja", {"messages": TOOL_TURNS, "tools": [WEATHER, CLOCK]}),
    ("hermes_tools.jinja", {"messages": [{"role": "system", "content": "Be brief."}] + TOOL_TURNS
                            + [{"role": "assistant", "content": "It is 18 C.", "tool_calls": []},
                               {"role": "user", "content": "Thanks"}],
                            "tools": [CLOCK], "tool_choice": "none"}),
    ("hermes_tools.jinja", {"messages": TOOL_TURNS[:1]}),
    ("hermes_tools.jinja", {"messages": [TOOL_TURNS[0], {"role": "assistant", "content": "Hm.",
                                         "tool_calls": TOOL_TURNS[1]["tool_calls"][:1]}],
                            "tools": [WEATHER], "add_generation_prompt": False}),
]


def vllm_context(body):
    """The template variables vLLM's chat endpoint gives a request's messages and tools: each
    tool as its pydantic model_dump() (type, then function's name, description, parameters and
    any extra field), a message's None content as "", an assistant's tool calls with their
    arguments JSON-decoded ({} when empty; an empty list dropped), a tool message's
    tool_call_id."""
    tools = None
    if body.get("tools"):
        tools = []
        for t in body["tools"]:
            f = t["function"]
            dumped = {"name": f["name"], "description": f.get("description"),
                      "parameters": f.get("parameters")}
            dumped.update({k: v for k, v in f.items() if k not in dumped})
            tools.append({"type": "function", "function": dumped})
    messages = []
    for m in body["messages"]:
        msg = {"role": m["role"], "content": "" if m.get("content") is None else m["content"]}
        if m["role"] == "assistant" and m.get("tool_calls") is not None:
            calls = copy.deepcopy(m["tool_calls"])
            for c in calls:
                args = c["function"].get("arguments")
                c["function"]["arguments"] = json.loads(args) if args else {}
            if calls:
                msg["tool_calls"] = calls
        elif m["role"] == "tool" and "tool_call_id" in m:
            msg["tool_call_id"] = m["tool_call_id"]
        messages.append(msg)
    return {"messages": messages, "tools": tools, "documents": None,
            "add_generation_prompt": body.get("add_generation_prompt", True)}


# Short templates and their variables: the subset's semantics one piece at a time.
EXPRESSIONS = [
    ("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % -3 }} {{ 7 / 2 }} {{ 4 / 2 }} {{ 2 ** 10 }}", {}),
    ("{{ (-1) ** 65 }} {{ -7 % 3 }} {{ -7 % -3 }} {{ 7 % -3 }} {{ 2 ** 62 }} {{ -9 // 4 }}"
     " {{ -(-3) }} {{ 2 ** 0 }} {{ 0 ** 0 }} {{ 1 // 0.1 }} {{ -7.5 % 2 }} {{ (1, 2) == [1, 2] }}"
     " {{ [1, [2, 'a']] < [1, [2, 'b']] }} {{ 2.0 is even }} {{ 7 | round }} {{ 7 | round(-1) }}",
     {}),
    ("{{ 1.5 + 1 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e-5 }} {{ 123456.789 }} {{ 3.0 }}", {}),
    ("{{ 'a' ~ 1 ~ none ~ true }} {{ 'ab' * 3 }} {{ [1] + [2, 3] }}", {}),
    ("{{ x }}|{{ x.y is defined }}|{{ undefined_name | length }}", {"x": {"z": 1}}),
    ("{{ [1, 'two', none, true, 2.0, {'k': [3]}] }}", {}),
    ("{{ {'a': 1, 'b': 'q\"uote', 'c': \"it's\"} }}", {}),
    ("{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ s.strip(' x') }}", {"s": "  xhix  "}),
    ("{{ s.split() }} {{ s.split(',') }} {{ s.split(',', 1) }} {{ s.rsplit(',', 1) }}",
     {"s": "a,b ,c, d"}),
    ("{{ s.upper() }} {{ s.lower() }} {{ s.title() }} {{ s.capitalize() }}", {"s": "hello wORLD-x2y"}),
    ("{{ s.replace('a', 'o') }} {{ s.replace('a', 'o', 1) }} {{ s.find('n') }} {{ s.count('a') }}",
     {"s": "banana"}),
    ("{{ s[1:] }}|{{ s[:-2] }}|{{ s[::-1] }}|{{ s[1:5:2] }}|{{ s[10:] }}|{{ s[-1] }}",
     {"s": "héllo wörld"}),
    ("{{ l[1:] }} {{ l[-2:] }} {{ l[::2] }} {{ l[5] is defined }}", {"l": [1, 2, 3, 4]}),
    ("{{ s | length }} {{ s | first }} {{ s | last }} {{ l | first }} {{ l | last }}",
     {"s": "añb", "l": [4, 5]}),
    ("{{ d | tojson }}|{{ d | tojson(indent=2) }}|{{ [] | tojson }}|{{ {} | tojson(indent=4) }}",
     {"d": {"name": "f", "args": {"x": [1, 2.5, "é\n\t\"q\"\\/\x01\x7f\b\f\r"], "y": None,
                                  "z": True}}}),
    ("{{ l | join(', ') }}|{{ l | map('upper') | join }}|{{ l | reverse | list }}|{{ l | sort }}",
     {"l": ["b", "c", "a"]}),
    ("{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='c') | join('+') }}"
     "|{{ ms | rejectattr('role', 'eq', 'user') | list | length }}"
     "|{{ ms | map(attribute='missing', default='-') | join }}",
     {"ms": [{"role": "user", "c": "1"}, {"role": "bot", "c": "2"}, {"role": "user", "c": "3"}]}),
    ("{{ d | items | list }} {% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}"
     " {{ d.keys() | list }} {{ d.values() | list }} {{ d.get('a') }} {{ d.get('z', 9) }}"
     " {{ d.get('z') }}", {"d": {"a": 1, "b": [2]}}),
    ("{{ n is number }} {{ n is integer }} {{ f is float }} {{ s is string }} {{ d is mapping }}"
     " {{ l is iterable }} {{ s is sequence }} {{ none is none }} {{ b is boolean }}"
     " {{ b is true }} {{ n is odd }} {{ n is even }} {{ n is divisibleby 3 }}"
     " {{ n is divisibleby(2) }} {{ s is lower }} {{ 'A' is upper }} {{ 3 is in l }}"
     " {{ n is eq 3 }} {{ n is gt(1) }} {{ n is not lt 1 }}",
     {"n": 3, "f": 1.0, "s": "ab", "d": {}, "l": [1, 3], "b": True}),
    ("{{ 'a' in 'cat' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'cat' }}"
     " {{ 1 == 1.0 }} {{ true == 1 }} {{ 'b' > 'a' }} {{ [1, 2] == [1, 2] }} {{ none == none }}",
     {}),
    ("{{ 0 or 'x' }} {{ 1 and 'y' }} {{ '' and 'z' }} {{ not [] }} {{ 'a' if 0 }}|"
     "{{ 'a' if 0 else 'b' if 1 else 'c' }}", {}),
    ("{{ -3 | abs }} {{ 2.567 | round(1) }} {{ 2.5 | round }} {{ '42' | int + 1 }}"
     " {{ 'x' | int(7) }} {{ '2.5' | float }} {{ 3 | string ~ '!' }} {{ 5 | float }}", {}),
    ("{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(5, 0, -2) | list }}"
     " {{ [1, 2, 3] | sum }} {{ [3, 1, 2] | min }} {{ [3, 1, 2] | max }} {{ [1, 1, 2] | unique | list }}",
     {}),
    ("{{ text | indent(2) }}|{{ text | indent(2, true) }}|{{ text | indent(2, blank=true) }}",
     {"text": "a\n\nb\nc"}),
    ("{{ '<a href=\"x\">&</a>' | e }} {{ 'x' | safe }} {{ 'two words here' | wordcount }}"
     " {{ none | default('d') }} {{ none | default('d', true) }} {{ '' | d('e', boolean=true) }}",
     {}),
    ("{% set a, b = [1, 2] %}{{ b }}{{ a }} {% set t %}in {{ a }}{% endset %}[{{ t }}]"
     " {% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}", {}),
    ("{% for i in range(10) %}{% if i is odd %}{% continue %}{% endif %}"
     "{% if i > 6 %}{% break %}{% endif %}{{ i }}{% endfor %}", {}),
    ("{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{{ a }}{{ b }}"
     "{{ loop.previtem | default('^') }}{{ loop.nextitem | default('$') }},{% endfor %}"
     "{{ loop.revindex }}{{ loop.revindex0 }};{% endfor %}", {}),
    ("{% macro m(a, b=2, c='z') %}{{ a }}{{ b }}{{ c }}{% endmacro %}"
     "{{ m(1) }} {{ m(1, 3) }} {{ m(1, c='w') }} {{ m(a=5, b=6) }}", {}),
    ("{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * (fact(n - 1) | int) }}{% endif %}"
     "{% endmacro %}{{ fact(6) }}", {}),
    ("a  \n  {% if true %}\n    b\n  {% endif %}\nc {# note #}\n d\n{%- if true -%}\n e \n{%- endif %}\n"
     "{%+ if true %}f{% endif %}  {{- ' g ' -}}  h\n  {{ 'i' }}\n", {}),
    ("{% for x in [] %}{{ x }}{% else %}empty{% endfor %} {% for c in 'ab' %}{{ c }}{% endfor %}"
     " {% for k in {'p': 1, 'q': 2} %}{{ k }}{% endfor %}", {}),
    ("{{ '\\u00e9\\x41\\n'|length }} {{ 'a' 'b' }} {{ (1, 2) }} {{ () }} {{ [1, 2,] | length }}"
     " {{ foo.0 }}", {"foo": ["zero"]}),
    ("{{ strftime_now('%Y-%m-%d %H:%M %b %A') }}", {}),
    ("{% generation %}kept {{ 1 }}{% endgeneration %}", {}),
    ("{% filter upper %}a{{ x }}b{% endfilter %}|{% filter replace('a', 'o') | trim %}  "
     "banana {% endfilter %}|{% for i in [1, 2] %}{% filter title %}n {{ i }} x{% endfilter %}"
     "{% endfor %}", {"x": "y"}),
    ("{{ 'abc'.startswith('b') }} {{ 'abc'.endswith(('x', 'c')) }} {{ ', '.join(['a', 'b']) }}"
     " {{ '12'.isdigit() }} {{ ' '.isspace() }} {{ 'a\\nb\\n'.splitlines() }}", {}),
    ("{{ 'hello wORLD-x2y (ab)[cd] x_y it\\'s' | title }}|{{ \"it's x_y\".title() }}|"
     "{{ 0.125 | round(2) }} {{ 3.5 | round }} {{ -2.5 | round }} {{ 2.4 | round(0, 'ceil') }}"
     " {{ 2.6 | round(method='floor') }}", {}),
    ("{{ messages | selectattr('role', 'in', ['user', 'system']) | map(attribute='role') | list }}"
     " {{ messages | map(attribute='content') | map('trim') | map('length') | list }}",
     {"messages": [SYSTEM, U1, A1]}),
    # Python's Unicode whitespace (str.strip, split, splitlines, isspace; Jinja's `-` control).
    ("{{ s | trim }}|{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ s.split() }}"
     "|{{ s.split(none, 1) }}|{{ ' \u3000\u2028\x1c'.isspace() }}|{{ '\u200b'.isspace() }}"
     "|{{ t.splitlines() }}|{{ t.splitlines(true) }}|{{ s.strip('\u00a0x') }}",
     {"s": "\u00a0x y\u3000z\u2028\x85", "t": "a\r\nb\x0bc\x1cd\u2028e\x85f\rg\n"}),
    ("a\u00a0 {{- 'b' -}} \u3000\u2009c", {}),
    # tojson's keyword arguments (transformers passes them to json.dumps).
    ("{{ d | tojson(ensure_ascii=true) }}|{{ d | tojson(indent='\t') }}"
     "|{{ d | tojson(separators=(',', ':')) }}|{{ d | tojson(sort_keys=true, indent=1) }}"
     "|{{ d | tojson(true) }}|{{ d | tojson(indent=0) }}|{{ d | tojson(indent=2, separators=['; ', '=']) }}",
     {"d": {"z": "é😀\n\u2028", "a": [1, {"b": None}], "m": []}}),
    # unique, min, max, sort, map and selectattr as Jinja's: case-insensitive by default, the
    # item (not its attribute) from min/max, dotted attributes with integer parts.
    ("{{ ['a', 'A', 'b'] | unique | list }} {{ ['a', 'A', 'b'] | unique(true) | list }}"
     " {{ items | max(attribute='n') }} {{ items | min(attribute='n') }} {{ ['b', 'A', 'a'] | max }}"
     " {{ ['b', 'A', 'C'] | max(case_sensitive=true) }} {{ ['b', 'A', 'a'] | min }}"
     " {{ items | map(attribute='t.0') | list }} {{ items | sort(attribute='t.1') | map(attribute='n') | list }}"
     " {{ items | selectattr('t.0', 'eq', 'x') | list | length }}"
     " {{ items | unique(attribute='k') | map(attribute='n') | list }} {{ items | sum(attribute='n') }}",
     {"items": [{"n": 3, "t": ["x", "b"], "k": "A"}, {"n": 1, "t": ["y", "a"], "k": "a"},
                {"n": 2, "t": ["x", "c"], "k": "B"}]}),
    # Macros see the scope they were defined in; a default sees the parameters before it.
    ("{% for x in [1, 2] %}{% macro m() %}[{{ x }}]{% endmacro %}{{ m() }}{% endfor %}"
     " {% macro f(a, b=a ~ '!') %}{{ a }}{{ b }}{% endmacro %}{{ f('q') }} {{ f('q', 'r') }}", {}),
    # Case mappings past ASCII (Unicode's simple mappings, and 'ß' -> 'SS').
    ("{{ 'éàÿ ǆ ĳ' | upper }} {{ 'ΑΒΓ Ωμέγα ДОМ' | lower }} {{ 'привет мир-éa' | title }}"
     " {{ 'éCOLE' | capitalize }} {{ 'élan vital'.title() }} {{ 'ÉCOLE'.islower() }}"
     " {{ 'école'.islower() }} {{ 'Ωμέγα'.isalpha() }} {{ 'ÀB'.isupper() }} {{ 'Ωμέγα'.upper() }}"
     " {{ 'straße' | upper }} {{ 'ßa' | capitalize }} {{ 'ßa ßb'.title() }} {{ 'ßx' | title }}"
     " {{ 'ẞ' | lower }}", {}),
    ("{{ 1.5 | round(1000000) }} {{ 1e300 | round(20) }} {{ 2.5 | round(-400) }} {{ 7 | round(5) }}",
     {}),
    # A dict's items/keys/values/get are its methods; x['items'] is the key.
    ("{{ d.items() | list }} {{ d['items'] }} {{ d.get('items') }} {{ d.keys() | list }}"
     " {{ d.items is defined }} {{ d | attr('items') is defined }} {{ d.values() | list }}",
     {"d": {"items": "I", "keys": "K", "get": "G"}}),
    ("{{ (1, 2) + (3,) }} {{ (1,) * 2 }} {{ [1] + [2] }} {{ ((1, 2) + (3,)) | length }}", {}),
    ("{{ d | dictsort }} {{ d | dictsort(by='value') }} {{ d | dictsort(reverse=true) }}"
     " {{ d | dictsort(true) }} {% for k, v in d | dictsort %}{{ k }}{{ v }}{% endfor %}",
     {"d": {"b": 2, "A": 3, "a": 1}}),
    ("{{ '%s-%d-%r' % ('a', 2.7, 'b') }} {{ '%s!' % 5 }} {{ '%05.1f|%-4s|%x|%3d' % (3.14159, 'ab', 255, 7) }}"
     " {{ '{} {}'.format(1, 'x') }} {{ '{1}{0}{n}'.format('a', 'b', n='N') }} {{ '{{}}{!r}'.format('q') }}"
     " {{ '%s and %s' | format('x', 'y') }} {{ '%(a)s' | format(a=1) }} {{ '%s' % [1, 2] }}"
     " {{ '%(k)s=%(v)d %%' % {'k': 'x', 'v': 3} }} {{ '%.2s' % 'abc' }}", {}),
    ("{% set ns = namespace(v=4) %}{{ 'hello world foo bar' | truncate(9) }}|"
     "{{ 'hello world foo bar' | truncate(9, true) }}|{{ 'hello world foo bar' | truncate(9, leeway=0) }}|"
     "{{ 'short' | truncate(9) }}|{{ 'hello world' | truncate(13, end='…') }}|{{ 'ab' | center(7) }}|"
     "{{ 'abc' | center(8) }}|{{ range(5) | batch(2) | list }}|{{ range(5) | batch(2, 'x') | list }}|"
     "{{ ns | attr('v') }}|{{ {'a': 1} | attr('a') is defined }}", {}),
    ("{% for x in [1, 1, 2, 2, 1] %}{{ loop.changed(x) }}{% endfor %}"
     " {% for x in 'aab' %}{% if loop.changed(x, 1) %}{{ x }}{% endif %}{% endfor %}", {}),
    ("{% set a, b = 1, 2 %}{{ a }}{{ b }} {% set t = 3, 4 %}{{ t }} {% set u = 5, %}{{ u }}", {}),
    ("{{ strftime_now('%Y-%m-%d ' * 40) | length }}", {}),
    # Jinja2 checks a filter or test name inside an if only when it runs.
    ("{% if false %}{{ 'x' | nosuchfilter }}{% elif false %}{{ 1 is nosuchtest }}{% endif %}"
     "{{ 1 if true else 2 | nosuchfilter }}", {}),
]

# Templates Jinja2 refuses at render time: the C++ side must fail too (any error).
ERRORS = [
    ("{{ raise_exception('no system messages please') }}", {}),
    ("{{ missing.attr }}", {}),
    ("{{ 1 + 'a' }}", {}),
    ("{{ 1 // 0 }}", {}),
    ("{{ l.append(1) }}", {"l": []}),
    ("{% set x.y = 1 %}", {"x": {}}),
    ("{{ none | length }}", {}),
    ("{{ 5 is divisibleby 0 }}", {}),
    ("{{ 'x' | nosuchfilter }}", {}),
    ("{{ 'a b'.split('') }}", {}),
    ("{{ raise_exception() }}", {}),
    ("{{ raise_exception('a', 'b') }}", {}),
    ("{{ [1] + (2,) }}", {}),
    ("{{ {'a': 1} | dictsort(by='x') }}", {}),
    ("{{ {'a': 1} | tojson(bogus=1) }}", {}),
    ("{% for x in [] %}{{ x | nosuchfilter }}{% endfor %}", {}),
    ("{% if true %}{% for x in [] %}{{ x is nosuchtest }}{% endfor %}{% endif %}", {}),
    ("{{ '%s %s' % ('a',) }}", {}),
    ("{{ '{0}'.format() }}", {}),
    ("{{ 'hello' | truncate(1) }}", {}),
]


# Random expressions over RANDOM_CONTEXT (seeded, so golden.json is stable): operators, filters,
# tests, methods, indexing and slicing combined up to three deep. Only constructs whose printed
# form does not depend on Python object identity are drawn (no bare iterators, no `sameas`, no
# Markup from `escape`), and `%` only between numbers.
RANDOM_CONTEXT = {"n": 7, "m": -3, "f": 2.5, "s": "Hi There, abc", "e": "", "w": "  pad me ",
                  "l": [3, 1, 2], "ls": ["b", "A", "a"], "d": {"a": 1, "b": "x"},
                  "z": None, "t": True}
ATOMS = ["n", "m", "f", "s", "e", "w", "l", "ls", "d", "z", "t", "0", "1", "-2", "10", "3.75",
         "0.1", "'ab'", "'Hello World'", "' x '", "'a,b'", "[1, 2]", "[]", "{'k': 'v'}", "none",
         "true", "false"]
FILTERS = ["length", "upper", "lower", "trim", "first", "last", "join(',')", "join", "string",
           "int", "float", "abs", "default('q')", "reverse | list", "sort | list", "list",
           "unique | list", "tojson", "title", "capitalize", "round", "round(1, 'floor')", "sum",
           "min", "max", "wordcount", "replace('a', 'o')", "count", "items | list",
           "map('string') | list", "select('odd') | list", "reject('none') | list",
           "indent(2)", "d(0, true)"]
TESTS = ["defined", "none", "string", "number", "integer", "float", "odd", "even", "mapping",
         "iterable", "sequence", "boolean", "true", "false", "lower", "upper",
         "divisibleby(3)", "eq 1", "gt 2", "in [1, 2, 3]"]
METHODS = ["upper()", "lower()", "strip()", "split()", "split(',')", "startswith('H')",
           "endswith('c')", "replace('a', 'b')", "title()", "find('e')", "count('a')",
           "lstrip()", "rstrip()", "capitalize()", "isdigit()", "get('a')", "get('zz', 5)",
           "keys() | list", "values() | list"]
BINARY = ["+", "-", "*", "//", "/", "~", "==", "!=", "<", ">", "<=", ">=", "and", "or", "in",
          "not in", "**"]


def random_expr(rng, depth):
    if depth == 0 or rng.random() < 0.25:
        return rng.choice(ATOMS)
    kind = rng.randrange(9)
    a = random_expr(rng, depth - 1)
    if kind == 0:
        if rng.random() < 0.1:  # % between numbers only (str % x is printf formatting)
            return f"({rng.choice(['n', 'm', '10', '-2', 'f'])} % {rng.choice(['n', 'm', '3', '-4'])})"
        return f"({a} {rng.choice(BINARY)} {random_expr(rng, depth - 1)})"
    if kind == 1:
        return f"({a} | {rng.choice(FILTERS)})"
    if kind == 2:
        return f"({a} is {'not ' if rng.random() < 0.3 else ''}{rng.choice(TESTS)})"
    if kind == 3:
        return f"({a}).{rng.choice(METHODS)}"
    if kind == 4:
        return f"({a})[{rng.choice(['0', '1', '-1', '5', chr(39) + 'a' + chr(39)])}]"
    if kind == 5:
        lo, hi = rng.choice(["", "1", "-2"]), rng.choice(["", "2", "-1"])
        step = rng.choice(["", ":-1", ":2"])
        # Through `t` (true): Jinja evaluates an output of constants at compile time, where an
        # unsliceable constant sliced prints as nothing; at run time, what a template's
        # variables meet, slicing it is an error.
        return f"(({a}) if t else z)[{lo}:{hi}{step}]"
    if kind == 6:
        return f"({a} if {random_expr(rng, depth - 1)} else {random_expr(rng, depth - 1)})"
    if kind == 7:
        return f"(not {a})" if rng.random() < 0.5 else f"(-{a})"
    return f"[{a}, {random_expr(rng, depth - 1)}]"


def render(env, source, context):
    # A copy: Jinja2's indent filter extends a list it is given in place (`s += "\n"`), which
    # would leak into the next case's context.
    context = copy.deepcopy(context)
    try:
        return {"expected": env.from_string(source).render(**context)}
    except jinja2.exceptions.TemplateError as e:
        return {"error": str(e)}
    except Exception as e:  # ZeroDivisionError, TypeError, SecurityError, ...
        return {"error": type(e).__name__ + ": " + str(e)}


def continue_cut(rendered, final):
    """transformers' continue_final_message rule."""
    loc = rendered.rindex(final.strip())
    if rendered[loc:loc + len(final.lstrip())] == final:
        return rendered[:loc + len(final.lstrip())]
    return rendered[:loc + len(final.strip())]


def cases():
    env = environment()
    out = []
    for name, (tokens, extra) in TEMPLATES.items():
        with open(os.path.join(HERE, name), encoding="utf-8") as f:
            source = f.read()
        for conv_name, messages in CONVERSATIONS.items():
            for gen, cont in ((True, False), (False, False), (False, True)):
                if cont != (conv_name == "open_assistant"):
                    continue
                context = dict(tokens)
                shown = messages
                if name in PARTS_TEMPLATES:
                    shown = [dict(m, content=[{"type": "text", "text": m["content"]}])
                             for m in messages]
                context.update(messages=shown, add_generation_prompt=gen, tools=None,
                               documents=None)
                context.update(extra)
                case = {"name": f"{name}/{conv_name}/gen={int(gen)}", "template": name,
                        "special_tokens": tokens, "extra": extra, "messages": messages,
                        "add_generation_prompt": gen, "continue_final_message": cont}
                r = render(env, source, context)
                if cont and "expected" in r:
                    r["expected"] = continue_cut(r["expected"], messages[-1]["content"])
                case.update(r)
                out.append(case)
    for i, (name, body) in enumerate(REQUESTS):
        with open(os.path.join(HERE, name), encoding="utf-8") as f:
            source = f.read()
        out.append({"name": f"request {i}", "request_template": name, "request": body,
                    **render(env, source, vllm_context(body))})
    for i, (source, context) in enumerate(EXPRESSIONS):
        out.append({"name": f"expression {i}", "source": source, "context": context,
                    **render(env, source, context)})
    rng = random.Random(20261204)
    for i in range(400):
        source = "{{ " + random_expr(rng, 3) + " }}"
        out.append({"name": f"random {i}", "source": source,
                    **render(env, source, RANDOM_CONTEXT)})
    for i, (source, context) in enumerate(ERRORS):
        r = render(env, source, context)
        assert "error" in r, f"error case {i} rendered: {r}"
        out.append({"name": f"error {i}", "source": source, "context": context, **r})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with golden.json, write nothing")
    args = ap.parse_args()
    # One case a line; the random cases' context once, as "random_context".
    head = {"jinja2": jinja2.__version__, "now": NOW, "random_context": RANDOM_CONTEXT}
    text = (json.dumps(head, ensure_ascii=False)[:-1] + ', "cases": [\n' +
            ",\n".join(json.dumps(c, ensure_ascii=False) for c in cases()) + "\n]}\n")
    path = os.path.join(HERE, "golden.json")
    if args.check:  # the cases only: the Jinja2 version may differ (Debian's, pip's)
        with open(path, encoding="utf-8") as f:
            old, new = json.load(f), json.loads(text)
            same = all(old[k] == new[k] for k in ("cases", "random_context", "now"))
        print("golden.json is " + ("up to date" if same else "out of date"))
        return 0 if same else 1
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
