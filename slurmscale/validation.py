"""The one way slurmscale words a pydantic ValidationError - from the config file, a
`--knob`, or a message Slurm or AWS hands us: one line per problem, naming the bad key and
value."""

from __future__ import annotations

from pydantic import ValidationError


def problems(e: ValidationError) -> list[str]:
    """`<key path>: <message> (got <value>)` per error; a missing key and an unknown one said
    so; a rule over the whole object (a validator's, no key) by its message alone."""
    out = []
    for err in e.errors():
        loc = ".".join(str(x) for x in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "missing":
            out.append(f"{loc}: required key is missing")
        elif err["type"] == "extra_forbidden":
            out.append(f"{loc}: unknown key (value {err['input']!r})")
        elif not loc and err["type"] == "value_error":
            out.append(msg)  # a rule over the whole object: its message names the keys
        else:
            out.append(f"{loc or 'top level'}: {msg} (got {err.get('input')!r})")
    return out


def first_problem(e: ValidationError) -> str:
    """The first of `problems`: where one line must say what is wrong."""
    return problems(e)[0]
