"""Reading slurmscale's config file: the YAML bounded (size, mode, aliases), validated into
`Config` (config.py), every error one line naming the key path and the refused value; and
the store URL's secrets found and redacted wherever a URL is printed."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from slurmscale.config import Config, ConfigError
from slurmscale.hookview import MAX_CONFIG_BYTES, digest, resolve_path
from slurmscale.validation import problems

__all__ = ["MAX_CONFIG_NODES", "load_config", "load_config_and_digest", "parse_config",
           "redact", "resolve_path", "url_secrets"]


def _format_validation_error(path: Path | str, err: ValidationError) -> str:
    return "\n".join([f"invalid config {path}:", *(f"  {p}" for p in problems(err))])


def parse_config(data: Any, source: str | Path = "<data>") -> Config:
    if not isinstance(data, dict):
        raise ConfigError(f"invalid config {source}: expected a mapping at the top level, "
                          f"got {type(data).__name__}")
    try:
        return Config.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_format_validation_error(source, e)) from None


# A config is a page of YAML: a larger file (MAX_CONFIG_BYTES), or one whose aliases expand
# it beyond what a person writes, is refused before it is expanded (a "billion laughs" alias
# bomb, a few hundred bytes, hung every command, the resume hook included, for over a minute).
MAX_CONFIG_NODES = 100_000


def _expanded(node: yaml.Node, memo: dict[int, int]) -> int:
    """How many nodes `node` becomes once every alias is expanded (aliases share nodes, so
    this counts each shared node once per use, computed once per node)."""
    if id(node) in memo:
        return memo[id(node)]
    memo[id(node)] = 1  # a recursive alias counts once: PyYAML refuses those anyway
    if isinstance(node, yaml.SequenceNode):
        n = 1 + sum(_expanded(c, memo) for c in node.value)
    elif isinstance(node, yaml.MappingNode):
        n = 1 + sum(_expanded(k, memo) + _expanded(v, memo) for k, v in node.value)
    else:
        n = 1
    memo[id(node)] = n
    return n


# libyaml where PyYAML has it: it refuses nesting past 1,000 levels at once, where the pure
# Python parser recursed to the interpreter's limit (a second per hostile file, ten under load)
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _duplicate_key(node: yaml.Node, seen: set[int]) -> yaml.Node | None:
    """The first key a mapping has twice (YAML forbids it; PyYAML keeps the last silently:
    a pool's second `max_nodes` would win unseen)."""
    if id(node) in seen:
        return None
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        keys: set[object] = set()
        for k, v in node.value:
            key = k.value if isinstance(k, yaml.ScalarNode) else id(k)
            if key in keys:
                return k
            keys.add(key)
            found = _duplicate_key(v, seen)
            if found is not None:
                return found
    elif isinstance(node, yaml.SequenceNode):
        for c in node.value:
            found = _duplicate_key(c, seen)
            if found is not None:
                return found
    return None


def _safe_yaml(text: str, source: Path) -> Any:
    loader = _LOADER(text)
    try:
        node = loader.get_single_node()
        if node is not None and _expanded(node, {}) > MAX_CONFIG_NODES:
            raise ConfigError(f"config {source} expands (through its aliases) to more than "
                              f"{MAX_CONFIG_NODES} values; refusing it")
        dup = _duplicate_key(node, set()) if node is not None else None
        if dup is not None:
            raise ConfigError(f"config {source} line {dup.start_mark.line + 1}: key "
                              f"{dup.value!r} is given twice in one mapping (the last would "
                              "win unseen); keep one")
        return loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()


def load_config(path: str | Path | None = None) -> Config:
    return load_config_and_digest(path)[0]


def load_config_and_digest(path: str | Path | None = None) -> tuple[Config, str]:
    """The validated config and the SHA-256 of the very bytes validated (the hooks' view is
    stamped with it: hashing the file again could see a newer edit)."""
    p = resolve_path(path)
    try:
        with open(p, "rb") as f:
            st = os.fstat(f.fileno())
            if st.st_size > MAX_CONFIG_BYTES:
                raise ConfigError(f"config {p} is larger than {MAX_CONFIG_BYTES} bytes; "
                                  "refusing it")
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as e:
        raise ConfigError(f"cannot read config {p}: {e.strerror}") from None
    mode = st.st_mode
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"config {p} is not UTF-8 text (byte {e.start})") from None
    if mode & 0o022:
        # It decides what runs as root and which cloud account is spent: nobody but its owner
        # may change it.
        raise ConfigError(f"config {p} is group- or world-writable (mode {mode & 0o777:04o}); "
                          f"refusing it: chmod go-w {p}")
    try:
        data = _safe_yaml(text, p)
    except yaml.YAMLError as e:
        raise ConfigError(f"config {p} is not valid YAML: {e}") from None
    except RecursionError:
        raise ConfigError(f"config {p} nests too deeply") from None
    cfg = parse_config(data, p)
    if mode & 0o004 and url_secrets(cfg.store_url):
        raise ConfigError(f"config {p} is world-readable and its store_url carries a password; "
                          "move the password to store_password_file (mode 0600) or "
                          f"chmod o-r {p}")
    return cfg, digest(raw)


# Query parameters of a database URL that carry a credential (SQLAlchemy passes the query to
# the driver: psycopg takes ?password=, ?sslpassword=, ...).
_SECRET_PARAM = re.compile(r"pass|pwd|secret|token|credential|key", re.IGNORECASE)


def url_secrets(url: str) -> list[str]:
    """Every credential a store URL carries, in any form SQLAlchemy accepts: the userinfo's
    password and credential-like query parameters. Without SQLAlchemy: the hooks load the
    config too, and import nothing heavy."""
    from urllib.parse import parse_qsl, unquote, urlsplit

    try:
        parts = urlsplit(url)
        found = [unquote(parts.password)] if parts.password else []
        found += [v for k, v in parse_qsl(parts.query, keep_blank_values=False)
                  if _SECRET_PARAM.search(k) and v]
    except ValueError:
        return []
    return found


def redact(text: str, url: str) -> str:
    """`text` (a URL, an error message) with every credential of `url` replaced by ***."""
    for secret in sorted(url_secrets(url), key=len, reverse=True):
        from urllib.parse import quote

        for form in {secret, quote(secret, safe=""), quote(secret)}:
            text = text.replace(form, "***")
    return text
