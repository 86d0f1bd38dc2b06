"""Vetted stand-ins for the few standard-library names that reach outside memory.

Model code reads and transforms data in memory; a handful of names in the
allowed modules would open a file by name or read the host's identity.
``modules.py`` exposes the stand-ins below in their place (:data:`STAND_INS`)
and withholds the rest (``io.open``, ``gzip.open``, ``codecs.open``,
``uuid.getnode`` ...: its ``ONLY_ATTRIBUTES``).

* ``xml.etree.ElementTree``: ``parse``, ``iterparse``, ``canonicalize(from_file=)``
  and ``ElementTree.parse``/``write`` take file *objects* only (``io.StringIO``,
  ``io.BytesIO`` or the model's own object with ``read``/``write``), never a path
  or a descriptor number.  Any other object is wrapped in a reader or writer of
  ours, so the stdlib's own ``hasattr(source, "read")`` check, which opens the
  file when it fails, always passes.  :class:`ElementTree` wraps the real tree
  rather than subclassing it: a subclass's ``mro()`` would hand out the real
  class, whose methods open paths.  It cannot be subclassed and keeps the real
  tree in a slot, which model code cannot read.
* ``uuid.uuid1``: a random node (RFC 4122 §4.5, the multicast bit set) instead
  of the host's hardware address, which the stdlib reads through libuuid or by
  running ``ip``/``ifconfig``.
* ``contextlib.redirect_stdout``/``redirect_stderr``: the real classes swap the
  ``sys`` attribute their ``_stream`` class attribute names, and a subclass of
  model code could name any (``_stream = "modules"`` hands out ``sys.modules``);
  :class:`Redirect` wraps one and cannot be subclassed.
* ``codecs.lookup``: its ``CodecInfo`` without the stream reader and writer
  classes, whose ``__getattr__`` forwards any name, private ones included, to
  the object they wrap (a subclass of model code would read them unguarded).

Entity expansion in XML is bounded by libexpat itself (2.4.0 and later): past
8 MiB of expanded text a document may not expand to more than 100 times its
size, so a "billion laughs" document ends in ``ParseError``.  Without that
guarantee :data:`STAND_INS` leaves ElementTree out (``modules.py``).
"""

from __future__ import annotations

import codecs
import contextlib
import io
import os
import pyexpat
import sys
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["EXPAT_LIMITS_AMPLIFICATION", "STAND_INS", "ElementTree", "Redirect", "lookup", "uuid1"]

#: libexpat's billion-laughs protection (amplification limit) arrived in 2.4.0.
EXPAT_LIMITS_AMPLIFICATION = pyexpat.version_info >= (2, 4, 0)

_MEMORY_FILES = (io.StringIO, io.BytesIO)
_NO_FILES = "the sandbox has no files; pass io.StringIO(text) or io.BytesIO(data)"


class _Reader:
    """A source with a ``read`` method, whatever the model's object claims."""

    __slots__ = ("read",)

    def __init__(self, read: Callable[[int], Any]) -> None:
        self.read = read


class _Writer:
    """A target with a ``write`` method, whatever the model's object claims."""

    __slots__ = ("write",)

    def __init__(self, write: Callable[[Any], Any]) -> None:
        self.write = write


def _file_method(obj: object, method: str, what: str) -> Callable[..., Any]:
    # str (and its subclasses), bytes, paths and ints are what open() takes.
    if isinstance(obj, str | bytes | bytearray | int | os.PathLike):
        raise TypeError(f"{what}: {_NO_FILES}, or use ET.fromstring(text)")
    found: Callable[..., Any] | None = getattr(obj, method, None)
    if not callable(found):
        raise TypeError(f"{what}: expected a file object with a {method}() method; {_NO_FILES}")
    return found


def _source(obj: object, what: str) -> Any:
    if type(obj) in _MEMORY_FILES:
        return obj
    return _Reader(_file_method(obj, "read", what))


def _target(obj: object, what: str) -> Any:
    if type(obj) in _MEMORY_FILES:
        return obj
    return _Writer(_file_method(obj, "write", what))


class ElementTree:
    """``xml.etree.ElementTree.ElementTree`` that reads and writes file objects only."""

    __slots__ = ("_tree",)

    def __init__(self, element: Any = None, file: Any = None) -> None:
        self._tree = ET.ElementTree(element)
        if file is not None:
            self.parse(file)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        raise TypeError("ElementTree cannot be subclassed in the sandbox; wrap it instead")

    def __repr__(self) -> str:
        return f"<xml.etree.ElementTree.ElementTree object at {id(self):#x}>"

    def getroot(self) -> Any:
        return self._tree.getroot()

    def parse(self, source: Any, parser: Any = None) -> Any:
        return self._tree.parse(_source(source, "ElementTree.parse"), parser)

    def iter(self, tag: str | None = None) -> Iterator[Any]:
        return self._tree.iter(tag)

    def find(self, path: str, namespaces: Any = None) -> Any:
        return self._tree.find(path, namespaces)

    def findtext(self, path: str, default: Any = None, namespaces: Any = None) -> Any:
        return self._tree.findtext(path, default, namespaces)

    def findall(self, path: str, namespaces: Any = None) -> list[Any]:
        return self._tree.findall(path, namespaces)

    def iterfind(self, path: str, namespaces: Any = None) -> Iterator[Any]:
        return self._tree.iterfind(path, namespaces)

    def write(self, file: Any, *args: Any, **kwargs: Any) -> None:
        self._tree.write(_target(file, "ElementTree.write"), *args, **kwargs)

    def write_c14n(self, file: Any) -> None:
        self.write(file, method="c14n")


def _element_of(tree: Any) -> Any:
    return tree.getroot() if type(tree) is ElementTree else tree


def parse(source: Any, parser: Any = None) -> ElementTree:
    """``ET.parse`` of a file object; ``ET.fromstring(text)`` parses text."""
    tree = ElementTree()
    tree.parse(source, parser)
    return tree


def iterparse(source: Any, events: Any = None, parser: Any = None) -> Any:
    return ET.iterparse(_source(source, "iterparse"), events, parser)


def canonicalize(xml_data: Any = None, *, out: Any = None, from_file: Any = None,
                 **options: Any) -> Any:
    if from_file is not None:
        from_file = _source(from_file, "canonicalize(from_file=...)")
    return ET.canonicalize(xml_data, out=out, from_file=from_file, **options)


def indent(tree: Any, space: str = "  ", level: int = 0) -> None:
    ET.indent(_element_of(tree), space, level)


def dump(elem: Any) -> None:
    """``ET.dump``: the XML to ``sys.stdout`` (the printed output), never to a descriptor
    number that ``contextlib.redirect_stdout`` may have put there."""
    target = _target(sys.stdout, "ET.dump")
    tree = ET.ElementTree(_element_of(elem))
    tree.write(target, encoding="unicode")
    root: Any = tree.getroot()
    tail = root.tail
    if not tail or tail[-1] != "\n":
        target.write("\n")


def uuid1(node: int | None = None, clock_seq: int | None = None) -> uuid.UUID:
    """``uuid.uuid1`` with a random node unless one is given, never the host's address."""
    if node is None:
        node = int.from_bytes(os.urandom(6), "big") | (1 << 40)
    return uuid.uuid1(node, clock_seq)


class Redirect:
    """What ``contextlib.redirect_stdout(target)`` returns in the sandbox: the real one, sealed."""

    __slots__ = ("_redirect",)

    def __init__(self, redirect: contextlib.AbstractContextManager[Any]) -> None:
        self._redirect = redirect

    def __init_subclass__(cls, **kwargs: Any) -> None:
        raise TypeError("contextlib's redirections cannot be subclassed in the sandbox")

    def __enter__(self) -> Any:
        return self._redirect.__enter__()

    def __exit__(self, *exc: Any) -> Any:
        return self._redirect.__exit__(*exc)


def redirect_stdout(new_target: Any) -> Redirect:
    return Redirect(contextlib.redirect_stdout(new_target))


def redirect_stderr(new_target: Any) -> Redirect:
    return Redirect(contextlib.redirect_stderr(new_target))


def lookup(encoding: str) -> codecs.CodecInfo:
    """``codecs.lookup`` without the stream classes (``streamreader`` is None)."""
    info: Any = codecs.lookup(encoding)
    return codecs.CodecInfo(info.encode, info.decode, None, None, info.incrementalencoder,
                            info.incrementaldecoder, info.name,
                            _is_text_encoding=info._is_text_encoding)


#: What ``modules.py`` exposes instead of the module's own attributes of these names.
STAND_INS: dict[str, dict[str, object]] = {
    "codecs": {"lookup": lookup},
    "contextlib": {"redirect_stdout": redirect_stdout, "redirect_stderr": redirect_stderr},
    "uuid": {"uuid1": uuid1},
    "xml.etree.ElementTree": {
        "ElementTree": ElementTree, "parse": parse, "iterparse": iterparse,
        "canonicalize": canonicalize, "indent": indent, "dump": dump,
    },
}
