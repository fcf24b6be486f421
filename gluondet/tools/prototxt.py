"""Protocol buffer text format (``.prototxt``, TAO's experiment specs), read against a schema.

`parse` turns text into `Field` lists (no schema): ``name: value``, ``name { ... }``,
``name < ... >`` (a colon before a block is allowed), repeated names, ``[a, b]`` lists,
quoted strings (adjacent ones joined, C escapes), numbers (``1``, ``-2.5e-3``, ``0x1F``,
``1.5f``, ``inf``, ``nan``), identifiers (enum values, ``true``/``false``), ``#`` comments and
optional ``;`` or ``,`` after a field. `validate` checks the fields against a schema (a dict
of message name -> {field: type}) and returns `Message` dicts of Python values; each error
names the file and line, an unknown name with the closest known ones.

A field type is a scalar (``'float'``, ``'double'``, ``'int32'``, ``'uint32'``, ``'bool'``,
``'string'``), a message name, ``('enum', ('A', 'B'))`` or ``('map', key, value)``, optionally
``('repeated', type)``. A message's ``'__oneof__'`` entry lists groups of fields of which at
most one may be set. Proto3 semantics: a field not written is absent from the `Message`
(its default is the reader's business).
"""
import collections
import difflib
import re

__all__ = ['ProtoTextError', 'Field', 'Message', 'parse', 'validate', 'did_you_mean']

Field = collections.namedtuple('Field', ['name', 'value', 'line'])
Field.__doc__ = """One ``name: value`` or ``name { ... }``: ``value`` a `Token` or a list of
Fields (a block); ``line`` 1-based."""
Token = collections.namedtuple('Token', ['kind', 'text', 'value', 'line'])

SCALARS = ('float', 'double', 'int32', 'uint32', 'int64', 'uint64', 'bool', 'string')


class ProtoTextError(ValueError):
    """A syntax or schema error, ``'FILE:LINE: what'``."""

    def __init__(self, source, line, message):
        self.source, self.line = source, line
        super().__init__('%s:%s: %s' % (source, line, message) if line else
                         '%s: %s' % (source, message))


class Message(dict):
    """A validated message: ``{field: value}``; ``lines[field]`` is the line it was written on
    (the first, for a repeated field)."""

    def __init__(self, name, line=None):
        super().__init__()
        self.name, self.line, self.lines = name, line, {}


def did_you_mean(word, choices):
    """``" (did you mean 'x'?)"`` for the closest of ``choices``, else ``''``."""
    close = difflib.get_close_matches(word, list(choices), n=2, cutoff=0.6)
    if not close:
        return ''
    return ' (did you mean %s?)' % ' or '.join(repr(c) for c in close)


# ---------------------------------------------------------------- tokens

_TOKEN = re.compile(r'''
    (?P<space>[ \t\r\f\v]+) | (?P<newline>\n) | (?P<comment>\#[^\n]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<number>[-+]?(?:0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?[fF]?)(?![\w.]))
  | (?P<ident>-?[A-Za-z_][\w.]*)
  | (?P<symbol>[{}<>\[\]:;,])
''', re.VERBOSE)
_ESCAPES = {'n': '\n', 't': '\t', 'r': '\r', 'a': '\a', 'b': '\b', 'f': '\f', 'v': '\v',
            '\\': '\\', "'": "'", '"': '"', '?': '?'}


def _unescape(body, source, line):
    out, i = [], 0
    while i < len(body):
        ch = body[i]
        if ch != '\\':
            out.append(ch)
            i += 1
            continue
        nxt = body[i + 1]
        if nxt in _ESCAPES:
            out.append(_ESCAPES[nxt])
            i += 2
        elif nxt in 'xX':
            digits = re.match(r'[0-9a-fA-F]{1,2}', body[i + 2:])
            if not digits:
                raise ProtoTextError(source, line, 'bad \\x escape in a string')
            out.append(chr(int(digits.group(), 16)))
            i += 2 + len(digits.group())
        elif nxt in '01234567':
            digits = re.match(r'[0-7]{1,3}', body[i + 1:]).group()
            out.append(chr(int(digits, 8)))
            i += 1 + len(digits)
        else:
            raise ProtoTextError(source, line, 'unknown escape \\%s in a string' % nxt)
    return ''.join(out)


def _tokens(text, source):
    line, pos = 1, 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise ProtoTextError(source, line, 'unexpected %r' % text[pos:pos + 10].split()[0]
                                 if text[pos:pos + 10].split() else 'unexpected character')
        kind, piece = match.lastgroup, match.group()
        pos = match.end()
        if kind == 'newline':
            line += 1
        elif kind == 'string':
            yield Token('string', piece, _unescape(piece[1:-1], source, line), line)
        elif kind == 'number':
            yield Token('number', piece, piece, line)
        elif kind in ('ident', 'symbol'):
            yield Token(kind, piece, piece, line)
    yield Token('end', '', None, line)


# ---------------------------------------------------------------- syntax

class _Parser:
    def __init__(self, text, source):
        self.source = source
        self.tokens = list(_tokens(text, source))
        self.pos = 0

    def peek(self):
        return self.tokens[self.pos]

    def take(self):
        token = self.tokens[self.pos]
        self.pos += 1
        return token

    def error(self, token, message):
        return ProtoTextError(self.source, token.line, message)

    def expect(self, symbol):
        token = self.take()
        if token.text != symbol or token.kind != 'symbol':
            raise self.error(token, 'expected %r, got %s' % (symbol, _show(token)))
        return token

    def fields(self, close=None):
        fields = []
        while True:
            token = self.peek()
            if token.kind == 'end':
                if close:
                    raise self.error(token, 'missing %r at the end of the file' % close)
                return fields
            if close and token.text == close and token.kind == 'symbol':
                self.take()
                return fields
            fields.append(self.field())
            if self.peek().text in (';', ',') and self.peek().kind == 'symbol':
                self.take()

    def field(self):
        name = self.take()
        if name.kind != 'ident' or name.text.startswith('-'):
            raise self.error(name, 'expected a field name, got %s' % _show(name))
        token = self.peek()
        colon = token.kind == 'symbol' and token.text == ':'
        if colon:
            self.take()
            token = self.peek()
        if token.kind == 'symbol' and token.text in '{<':
            self.take()
            return Field(name.text, self.fields('}' if token.text == '{' else '>'), name.line)
        if not colon:
            raise self.error(token, "expected ':' or '{' after %s, got %s"
                             % (name.text, _show(token)))
        if token.kind == 'symbol' and token.text == '[':
            self.take()
            values = []
            while not (self.peek().kind == 'symbol' and self.peek().text == ']'):
                values.append(self.block_or_scalar(name))
                if self.peek().kind == 'symbol' and self.peek().text == ',':
                    self.take()
                elif not (self.peek().kind == 'symbol' and self.peek().text == ']'):
                    raise self.error(self.peek(), "expected ',' or ']' in the list of %s, got %s"
                                     % (name.text, _show(self.peek())))
            self.take()
            return Field(name.text, _List(Field(name.text, v, name.line) for v in values),
                         name.line)
        return Field(name.text, self.scalar(name), name.line)

    def block_or_scalar(self, name):
        token = self.peek()
        if token.kind == 'symbol' and token.text in '{<':
            self.take()
            return self.fields('}' if token.text == '{' else '>')
        return self.scalar(name)

    def scalar(self, name):
        token = self.take()
        if token.kind == 'string':     # adjacent strings are one
            parts = [token.value]
            while self.peek().kind == 'string':
                parts.append(self.take().value)
            return token._replace(value=''.join(parts))
        if token.kind in ('number', 'ident'):
            return token
        raise self.error(token, 'expected a value for %s, got %s' % (name.text, _show(token)))


def _show(token):
    return 'the end of the file' if token.kind == 'end' else repr(token.text)


def parse(text, source='<spec>'):
    """The fields of a text-format message (no schema): a list of `Field`.

    A list value ``name: [a, b]`` becomes a Field whose value is a list of Fields, one per
    element (the reader treats it as the field repeated).

    Raises
    ------
    ProtoTextError
        Naming the line of a syntax error.
    """
    return _Parser(text, source).fields()


# ---------------------------------------------------------------- schema

def _kind(ftype):
    """``(repeated, base type)``."""
    if isinstance(ftype, tuple) and ftype[0] == 'repeated':
        return True, ftype[1]
    return False, ftype


def _number(token, ftype, source, name):
    text = token.text.rstrip('fF') if not token.text.lower().startswith(('0x', '-0x')) \
        else token.text
    if ftype in ('float', 'double'):
        if token.kind == 'ident' and token.text.lower().lstrip('-') in ('inf', 'infinity', 'nan'):
            return float(token.text)
        if token.kind == 'number':
            return float(int(text, 16)) if 'x' in text.lower() else float(text)
    elif token.kind == 'number' and re.fullmatch(r'[-+]?(0[xX][0-9a-fA-F]+|\d+)', token.text):
        value = int(token.text, 0) if 'x' in token.text.lower() else int(token.text)
        if ftype.startswith('uint') and value < 0:
            raise ProtoTextError(source, token.line, '%s is unsigned, got %s' % (name, value))
        return value
    raise ProtoTextError(source, token.line, '%s takes %s, got %s' % (
        name, 'a number' if ftype in ('float', 'double') else 'an integer', token.text))


def _scalar(token, ftype, source, name):
    if ftype == 'string':
        if token.kind != 'string':
            raise ProtoTextError(source, token.line, '%s takes a quoted string, got %s'
                                 % (name, token.text))
        return token.value
    if ftype == 'bool':
        value = None if token.kind == 'string' else {
            'true': True, 't': True, '1': True, 'false': False, 'f': False, '0': False}.get(
            token.text.lower())
        if value is None:
            raise ProtoTextError(source, token.line, '%s takes true or false, got %s'
                                 % (name, token.text))
        return value
    if isinstance(ftype, tuple) and ftype[0] == 'enum':
        names = ftype[1]
        if token.kind == 'number' and token.text.isdigit() and int(token.text) < len(names):
            return names[int(token.text)]
        if token.kind != 'ident' or token.text not in names:
            raise ProtoTextError(source, token.line, '%s takes one of %s, got %s%s' % (
                name, ', '.join(names), token.text, did_you_mean(token.text, names)))
        return token.text
    return _number(token, ftype, source, name)


def validate(fields, schema, message='Experiment', source='<spec>', line=None, path=''):
    """The fields of a `parse` checked against ``schema``, as a `Message` of Python values:
    a repeated field a list, a map a dict, a message a `Message`.

    Raises
    ------
    ProtoTextError
        For an unknown field (naming the closest known ones), a value of the wrong type, an
        unknown enum value, a singular field set twice, or two fields of one oneof.
    """
    spec = schema[message]
    known = [name for name in spec if name != '__oneof__']
    out = Message(message, line)
    for field in fields:
        where = path + field.name
        if field.name not in known:
            raise ProtoTextError(source, field.line, 'unknown field %s in %s%s' % (
                field.name, path.rstrip('.') or 'the spec', did_you_mean(field.name, known)))
        repeated, ftype = _kind(spec[field.name])
        items = field.value if _is_list(field.value) else [field]
        values = [_value(item, ftype, schema, source, where) for item in items]
        if isinstance(ftype, tuple) and ftype[0] == 'map':
            entries = out.setdefault(field.name, {})
            out.lines.setdefault(field.name, field.line)
            for key, value in values:
                entries[key] = value
            continue
        if repeated:
            out.setdefault(field.name, []).extend(values)
            out.lines.setdefault(field.name, field.line)
            continue
        if field.name in out or len(values) != 1:
            raise ProtoTextError(source, field.line, '%s is set more than once (it is not '
                                 'repeated)' % where)
        out[field.name], out.lines[field.name] = values[0], field.line
    for group in spec.get('__oneof__', ()):
        given = [name for name in group if name in out]
        if len(given) > 1:
            raise ProtoTextError(source, out.lines[given[1]], '%s and %s are alternatives: set '
                                 'one' % (path + given[0], path + given[1]))
    return out


class _List(list):
    """The Fields of a ``name: [a, b]`` list (a block is a plain list of Fields)."""


def _is_list(value):
    return isinstance(value, _List)


def _value(item, ftype, schema, source, where):
    value = item.value
    if isinstance(ftype, tuple) and ftype[0] == 'map':
        if not isinstance(value, list):
            raise ProtoTextError(source, item.line, '%s takes { key: ... value: ... }' % where)
        entry = validate(value, {'entry': {'key': ftype[1], 'value': ftype[2]}}, 'entry',
                         source, item.line, where + '.')
        if 'key' not in entry:
            raise ProtoTextError(source, item.line, '%s: an entry without a key' % where)
        return entry['key'], entry.get('value', _default(ftype[2]))
    if isinstance(ftype, str) and ftype in schema:
        if not isinstance(value, list):
            raise ProtoTextError(source, item.line, '%s is a message: write %s { ... }'
                                 % (where, where.rsplit('.', 1)[-1]))
        return validate(value, schema, ftype, source, item.line, where + '.')
    if isinstance(ftype, str) and ftype not in SCALARS:
        raise KeyError('schema: %s has the unknown type %r' % (where, ftype))
    if isinstance(value, list):
        raise ProtoTextError(source, item.line, '%s takes a value, not a block' % where)
    return _scalar(value, ftype, source, where)


def _default(ftype):
    return {'string': '', 'bool': False, 'float': 0.0, 'double': 0.0}.get(ftype, 0)
