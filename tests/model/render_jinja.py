#!/usr/bin/env python3
"""The reference for tandem's Jinja subset: renders a chat template with
Python's jinja2 configured as Hugging Face configures it for chat templates
(trim_blocks, lstrip_blocks, tojson as json.dumps without ASCII escapes,
raise_exception, strftime_now fixed to one date so output is reproducible).

Usage: render_jinja.py TEMPLATE CONTEXT_JSON   (rendered text on stdout;
exit 3 with "ERROR: message" when the template calls raise_exception, exit
4 with "ERROR: type: message" when rendering fails otherwise)."""
import json
import sys

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment


class TemplateError(Exception):
    pass


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        source = f.read()
    with open(sys.argv[2], encoding="utf-8") as f:
        context = json.load(f)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: "26 Jul 2024"
    try:
        out = env.from_string(source).render(**context)
    except TemplateError as e:
        print("ERROR: " + str(e))
        sys.exit(3)
    except Exception as e:  # a type error, an undefined value...: the template cannot render this
        print("ERROR: " + type(e).__name__ + ": " + str(e))
        sys.exit(4)
    sys.stdout.buffer.write(out.encode("utf-8"))


main()
