"""Turning a pydantic ValidationError from a file or message Slurm or AWS hands us into one
line that names the bad key and value."""

from __future__ import annotations

from pydantic import ValidationError


def first_problem(e: ValidationError) -> str:
    """`<loc>: <message> (got <value>)` for the first error ("top level" when no key)."""
    first = e.errors()[0]
    loc = ".".join(str(x) for x in first["loc"]) or "top level"
    msg = first["msg"].removeprefix("Value error, ")
    return f"{loc}: {msg} (got {first.get('input')!r})"
