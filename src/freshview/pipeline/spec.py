"""A pipeline file: ``CREATE SOURCE``, ``CREATE VIEW``, ``CREATE SINK`` and ``SET`` statements.

```sql
CREATE SOURCE orders (o_id INT PRIMARY KEY, o_customer INT, amount NUMERIC(10,2))
  WITH (connector = 'nats', url = 'nats://127.0.0.1:4222', subject = 'shop.orders', format = 'debezium_json');
CREATE VIEW totals AS SELECT o_customer, SUM(amount) AS total FROM orders GROUP BY o_customer;
CREATE SINK totals_out FROM totals WITH (connector = 'nats', url = 'nats://127.0.0.1:4222',
                                         subject = 'shop.totals', format = 'debezium_json',
                                         decimal_handling = 'precise', schemas = true);
SET updating_ttl = '1 hour';
SET update_aggregate_flush_interval = '1 second';
```

A sink's messages carry Kafka Connect's ``{"schema", "payload"}`` envelope unless ``schemas = false``
(``formats.debezium``); ``decimal_handling`` is ``precise`` (default), ``string`` or ``double``.

Statements are split with sqlglot's tokenizer (quotes, comments and dollar strings respected); the
view's ``SELECT`` is kept as written for the flow's SQL front end.  Every error names the file, line
and column of the construct it refuses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from sqlglot.errors import TokenError
from sqlglot.tokens import Token, Tokenizer, TokenType

from freshview.errors import FreshviewError, SchemaError
from freshview.formats.debezium import DECIMAL_HANDLING
from freshview.schema import TableSchema, schema_from_ddl

FORMATS = ("debezium_json",)
BOOLEANS = {"true": True, "false": False}
SETTINGS = {  # SET name -> what it is for (IncrementalFlow keyword)
    "updating_ttl": "state_ttl",
    "update_aggregate_flush_interval": "flush_interval",
}


class PipelineError(FreshviewError):
    """A pipeline file is malformed, or a connector cannot do what it asks."""


@dataclass(frozen=True)
class SourceSpec:
    name: str
    schema: TableSchema
    options: Mapping[str, str]
    line: int = 0

    @property
    def connector(self) -> str:
        return self.options["connector"]


@dataclass(frozen=True)
class ViewSpec:
    name: str
    sql: str
    line: int = 0


@dataclass(frozen=True)
class SinkSpec:
    name: str
    view: str
    options: Mapping[str, str]
    line: int = 0

    @property
    def connector(self) -> str:
        return self.options["connector"]

    @property
    def decimal_handling(self) -> str:
        return self.options.get("decimal_handling", "precise")

    @property
    def schemas(self) -> bool:
        """Messages inside ``{"schema", "payload"}`` envelopes (Kafka Connect's JSON converter's default)."""
        return BOOLEANS[self.options.get("schemas", "true").lower()]


@dataclass
class PipelineSpec:
    sources: dict[str, SourceSpec] = field(default_factory=dict)
    views: dict[str, ViewSpec] = field(default_factory=dict)
    sinks: dict[str, SinkSpec] = field(default_factory=dict)
    settings: dict[str, str] = field(default_factory=dict)


def parse_pipeline(text: str, where: str = "pipeline") -> PipelineSpec:
    """Read a pipeline file's text; ``PipelineError`` says which statement, where, and why."""
    try:
        tokens = Tokenizer().tokenize(text)
    except TokenError as exc:
        raise PipelineError(f"{where}: cannot read the file: {exc}") from None
    spec = PipelineSpec()
    for statement in _statements(tokens):
        _Statement(statement, text, where).parse_into(spec)
    if not spec.sources:
        raise PipelineError(f"{where}: no CREATE SOURCE statement")
    for sink in spec.sinks.values():
        if sink.view not in spec.views and sink.view not in spec.sources:
            raise PipelineError(f"{where}, line {sink.line}: sink {sink.name!r} reads {sink.view!r}, "
                                f"which is neither a view nor a source of this pipeline")
    return spec


def _statements(tokens: list[Token]) -> list[list[Token]]:
    out: list[list[Token]] = [[]]
    for t in tokens:
        if t.token_type == TokenType.SEMICOLON:
            out.append([])
        else:
            out[-1].append(t)
    return [s for s in out if s]


class _Statement:
    """One statement's tokens and a cursor over them."""

    def __init__(self, tokens: list[Token], text: str, where: str) -> None:
        self.tokens, self.text, self.where, self.i = tokens, text, where, 0

    # ---------------------------------------------------------------- cursor
    def error(self, message: str, token: Token | None = None) -> PipelineError:
        token = token or (self.tokens[self.i] if self.i < len(self.tokens) else self.tokens[-1])
        column = token.col - len(token.text) + 1 if token.col >= len(token.text) else token.col
        return PipelineError(f"{self.where}, line {token.line}, column {column}: {message}")

    def peek(self) -> Token | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def word(self) -> str:
        t = self.peek()
        return t.text.upper() if t is not None else ""

    def take(self) -> Token:
        t = self.peek()
        if t is None:
            raise self.error("the statement ends too early")
        self.i += 1
        return t

    def expect(self, *words: str) -> None:
        for w in words:
            if self.word() != w:
                got = self.peek().text if self.peek() is not None else "the end of the statement"
                raise self.error(f"expected {w}, found {got}")
            self.i += 1

    def name(self, what: str) -> str:
        t = self.take()
        if t.token_type not in (TokenType.VAR, TokenType.IDENTIFIER) and not t.text.isidentifier():
            raise self.error(f"expected the {what}'s name, found {t.text!r}", t)
        return t.text if t.token_type == TokenType.IDENTIFIER else t.text.lower()

    def end(self) -> None:
        if self.peek() is not None:
            raise self.error(f"unexpected {self.peek().text!r} after the end of the statement")

    def rest_text(self) -> str:
        """The statement's remaining text as written."""
        return self.text[self.tokens[self.i].start:self.tokens[-1].end + 1]

    def group_text(self) -> str:
        """Text between a '(' at the cursor and its matching ')' (cursor moves past it)."""
        open_ = self.take()
        if open_.token_type != TokenType.L_PAREN:
            raise self.error("expected '('", open_)
        depth = 1
        while True:
            t = self.take()
            depth += {TokenType.L_PAREN: 1, TokenType.R_PAREN: -1}.get(t.token_type, 0)
            if depth == 0:
                return self.text[open_.end + 1:t.start]

    def options(self) -> dict[str, str]:
        self.expect("WITH")
        if (self.peek() is None) or self.peek().token_type != TokenType.L_PAREN:
            raise self.error("expected '(' after WITH")
        self.take()
        out: dict[str, str] = {}
        while True:
            key_token = self.take()
            key = key_token.text.lower()
            if self.take().token_type != TokenType.EQ:
                raise self.error(f"expected '=' after option {key!r}", key_token)
            value = self.take()
            if value.token_type not in (TokenType.STRING, TokenType.NUMBER, TokenType.TRUE, TokenType.FALSE):
                raise self.error(f"option {key!r} takes a quoted string, a number, true or false, "
                                 f"not {value.text!r}", value)
            if key in out:
                raise self.error(f"option {key!r} is given twice", key_token)
            out[key] = value.text.lower() if value.token_type in (TokenType.TRUE, TokenType.FALSE) else value.text
            t = self.take()
            if t.token_type == TokenType.R_PAREN:
                return out
            if t.token_type != TokenType.COMMA:
                raise self.error(f"expected ',' or ')' after option {key!r}", t)

    # ---------------------------------------------------------------- statements
    def parse_into(self, spec: PipelineSpec) -> None:
        first = self.peek()
        word = self.word()
        if word == "SET":
            self.take()
            key = self.take()
            name = key.text.lower()
            if name not in SETTINGS:
                raise self.error(f"unknown setting {key.text!r}; known: {', '.join(SETTINGS)}", key)
            t = self.take()
            if t.token_type != TokenType.EQ and t.text.upper() != "TO":
                raise self.error(f"expected '=' after SET {key.text}", t)
            value = self.take()
            spec.settings[name] = value.text
            self.end()
            return
        if word != "CREATE":
            raise self.error(f"expected CREATE SOURCE, CREATE VIEW, CREATE SINK or SET, found {first.text!r}")
        self.take()
        if self.word() == "OR":
            self.expect("OR", "REPLACE")
        if self.word() == "MATERIALIZED":
            self.take()
        kind = self.word()
        if kind == "SOURCE":
            self._source(spec, first)
        elif kind == "VIEW":
            self._view(spec, first)
        elif kind == "SINK":
            self._sink(spec, first)
        else:
            raise self.error(f"expected SOURCE, VIEW or SINK after CREATE, found {self.peek().text!r}"
                             if self.peek() else "expected SOURCE, VIEW or SINK after CREATE")

    def _taken(self, spec: PipelineSpec, name: str, token: Token) -> None:
        if name in spec.sources or name in spec.views or name in spec.sinks:
            raise self.error(f"the name {name!r} is used twice", token)

    def _source(self, spec: PipelineSpec, first: Token) -> None:
        self.take()
        at = self.peek()
        name = self.name("source")
        self._taken(spec, name, at)
        columns_at = self.peek()
        try:
            schema = schema_from_ddl(self.group_text())
        except SchemaError as exc:
            raise self.error(f"source {name!r}: {exc}", columns_at) from None
        options = self.options()
        self.end()
        _check_options(self, options, f"source {name!r}", first)
        spec.sources[name] = SourceSpec(name, schema, options, first.line)

    def _view(self, spec: PipelineSpec, first: Token) -> None:
        self.take()
        at = self.peek()
        name = self.name("view")
        self._taken(spec, name, at)
        self.expect("AS")
        if self.peek() is None:
            raise self.error(f"view {name!r} has no query after AS")
        spec.views[name] = ViewSpec(name, self.rest_text(), first.line)

    def _sink(self, spec: PipelineSpec, first: Token) -> None:
        self.take()
        at = self.peek()
        name = self.name("sink")
        self._taken(spec, name, at)
        self.expect("FROM")
        view = self.name("view")
        options = self.options()
        self.end()
        _check_options(self, options, f"sink {name!r}", first)
        _check_sink_options(self, options, f"sink {name!r}", first)
        spec.sinks[name] = SinkSpec(name, view, options, first.line)


def _check_options(statement: _Statement, options: Mapping[str, str], what: str, token: Token) -> None:
    if "connector" not in options:
        raise statement.error(f"{what} needs WITH (connector = '...')", token)
    fmt = options.get("format", "debezium_json")
    if fmt not in FORMATS:
        raise statement.error(f"{what}: format {fmt!r} is not supported; supported: {', '.join(FORMATS)}", token)


def _check_sink_options(statement: _Statement, options: Mapping[str, str], what: str, token: Token) -> None:
    handling = options.get("decimal_handling", "precise")
    if handling not in DECIMAL_HANDLING:
        raise statement.error(f"{what}: decimal_handling {handling!r} is not one of {', '.join(DECIMAL_HANDLING)}",
                              token)
    if options.get("schemas", "true").lower() not in BOOLEANS:
        raise statement.error(f"{what}: schemas is true or false, not {options['schemas']!r}", token)
