#!/usr/bin/env python3
"""chat_template_goldens.py — what Python's jinja2 renders for every chat template in tests/data/templates,
the goldens of tests/test_jinja.cpp (common/tokenizer/jinja.h must give the same bytes).

Usage (repo root; needs only jinja2 >= 3.1, no transformers, no network):
    python3 oracle/chat_template_goldens.py            # writes tests/data/templates/goldens.json
    python3 oracle/chat_template_goldens.py --check    # renders again and says whether the file is current

Inputs, all in tests/data/templates/:
    *.jinja               the templates (SOURCES.md says where each came from)
    conversations.json    {"now": ISO time, "conversations": {name: {"messages": [...], "kwargs": {...},
                                                                   "add_generation_prompt": [true, false]}}}
    special_tokens.json   {"tokens": {template: {"bos_token": ..., ...}}}, as tokenizer_config.json gives them
    snippets.json         {"context": {...}, "snippets": [{"template": ..., "context": {...}}]}: small templates
                          that exercise one feature each (filters, tests, scoping, whitespace, errors)

For each template, conversation and add_generation_prompt value it lists ([true] unless it says otherwise;
both where the difference matters, e.g. a conversation that ends with the assistant) the output holds the
rendered text, or {"error": message} where the template raises (roles that do not alternate, an unsupported content
type, ...): the C++ side must then raise too, with one line naming the template.

The environment is the one transformers' apply_chat_template compiles templates in
(transformers/utils/chat_template_utils.py), rebuilt here so that the goldens need no transformers:
  - jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the loopcontrols
    extension and a {% generation %} ... {% endgeneration %} tag that renders its body unchanged (transformers'
    AssistantTracker does only that unless assistant masks are requested);
  - the tojson filter replaced by json.dumps(x, ensure_ascii=False, indent=indent, separators=separators,
    sort_keys=sort_keys) (no HTML escaping, key order kept);
  - globals raise_exception(message) (raises TemplateError) and strftime_now(format), here pinned to the
    conversations file's "now" (the C++ side reads the same time from CHAT_TEMPLATE_NOW);
  - render(messages=..., tools=..., documents=..., add_generation_prompt=..., **special_tokens, **kwargs):
    tools and documents None when the conversation has none, special tokens as strings (AddedToken objects
    give their content, null ones are left out), then the conversation's kwargs, which win on a clash.
Errors are recorded as "<ExceptionType>: <message>"; only the fact that a render fails is compared.
"""
import copy
import datetime
import json
import os
import sys

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.sandbox

HERE = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "templates"))


class GenerationTag(jinja2.ext.Extension):
    """{% generation %}body{% endgeneration %}: the body, rendered as if the tags were not there."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render_body"), [], [], body).set_lineno(lineno)

    def _render_body(self, caller):
        return caller()


def make_environment(now):
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols])

    def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def strftime_now(fmt):
        return now.strftime(fmt)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def special_token_strings(raw):
    """tokenizer_config.json's token fields as the strings transformers passes to the template."""
    out = {}
    for key, value in raw.items():
        if isinstance(value, dict):
            value = value.get("content")
        if value is not None:
            out[key] = value
    return out


def render(env, source, messages, kwargs, special, add_generation_prompt):
    # Copies: a jinja2 filter may change its input in place (indent appends to a list it is given).
    messages, kwargs = copy.deepcopy(messages), copy.deepcopy(kwargs)
    template = env.from_string(source)
    context = dict(special)
    context.update(kwargs)
    context.update(messages=messages, tools=kwargs.get("tools"), documents=kwargs.get("documents"),
                   add_generation_prompt=add_generation_prompt)
    return template.render(**context)


def build():
    with open(os.path.join(HERE, "conversations.json"), encoding="utf-8") as f:
        conv_doc = json.load(f)
    with open(os.path.join(HERE, "special_tokens.json"), encoding="utf-8") as f:
        tokens = json.load(f)["tokens"]
    now = datetime.datetime.fromisoformat(conv_doc["now"])
    env = make_environment(now)
    names = sorted(n[:-len(".jinja")] for n in os.listdir(HERE) if n.endswith(".jinja"))
    renders = {}
    n_text = n_error = 0
    for name in names:
        if name not in tokens:
            sys.exit(f"{name}.jinja has no entry in special_tokens.json")
        with open(os.path.join(HERE, name + ".jinja"), encoding="utf-8", newline="") as f:
            source = f.read()
        special = special_token_strings(tokens[name])
        out = {}
        for conv_name, conv in conv_doc["conversations"].items():
            for agp in conv.get("add_generation_prompt", [True]):
                key = f"{conv_name}/{'gen' if agp else 'nogen'}"
                try:
                    out[key] = render(env, source, conv["messages"], conv.get("kwargs", {}), special, agp)
                    n_text += 1
                except Exception as e:  # the C++ side must refuse this conversation as well
                    out[key] = {"error": f"{type(e).__name__}: {e}"}
                    n_error += 1
        renders[name] = out
    with open(os.path.join(HERE, "snippets.json"), encoding="utf-8") as f:
        snip_doc = json.load(f)
    snippets = []
    for snip in snip_doc["snippets"]:
        context = copy.deepcopy(snip_doc["context"])
        context.update(copy.deepcopy(snip.get("context", {})))
        try:
            snippets.append(env.from_string(snip["template"]).render(**context))
            n_text += 1
        except Exception as e:
            snippets.append({"error": f"{type(e).__name__}: {e}"})
            n_error += 1
    doc = {
        "about": "Rendered by oracle/chat_template_goldens.py with jinja2 in transformers' chat template "
                 "environment; do not edit.",
        "jinja2_version": jinja2.__version__,
        "now": conv_doc["now"],
        "renders": renders,
        "snippets": snippets,
    }
    return doc, n_text, n_error


def main():
    check = "--check" in sys.argv[1:]
    doc, n_text, n_error = build()
    text = json.dumps(doc, ensure_ascii=False, indent=0, sort_keys=True) + "\n"
    path = os.path.join(HERE, "goldens.json")
    if check:
        with open(path, encoding="utf-8") as f:
            same = f.read() == text
        print(f"{path}: {'current' if same else 'STALE: rerun without --check'}")
        sys.exit(0 if same else 1)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {path}: {len(doc['renders'])} templates and {len(doc['snippets'])} snippets, "
          f"{n_text} renders, {n_error} expected errors")


main()
