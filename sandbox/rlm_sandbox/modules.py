"""Read-only proxies for the standard modules model code may import.

Model code never receives a real module object: a real module leads to its
``__dict__``, to other modules (``json.codecs``, ``datetime.sys``) and from
there to ``os``.  A :class:`ModuleProxy` exposes only the public attributes of
one module whose values are not modules, metaclasses or interpreter plumbing
(nor other objects that lead out of the sandbox), minus a short list of known
gadgets: callables that look up or set attributes by a caller-chosen name with
plain ``getattr``/``setattr`` (``string.Formatter``, ``functools.update_wrapper``,
``copy.dispatch_table``), that ``eval`` annotations (``functools.singledispatch``,
``typing.get_type_hints``) or that build classes from a caller's namespace
(``dataclasses.make_dataclass``).  A few callables are replaced by guarded
equivalents that the policy registers (:func:`replace_attributes`):
``operator.attrgetter``/``methodcaller`` and ``dataclasses.dataclass``.

The data modules (csv, io, xml.etree.ElementTree, gzip, codecs ...) expose only
what reads and transforms data in memory: their file, process and host doors
are withheld (``io.open``, ``gzip.open``, ``uuid.getnode`` ...) or replaced by
the vetted stand-ins of ``facades.py`` (ElementTree's ``parse``/``write``).  A
refused import or a withheld name says what to use instead where there is an
obvious substitute (:data:`SUBSTITUTES`, :data:`ATTRIBUTE_HINTS`).

``from X import Y`` resolves ``Y`` with plain ``getattr`` (the RestrictedPython
guard is not involved), so the proxy is safe under plain attribute access on
its own: every attribute lookup, dunder names included, goes through
``ModuleProxy.__getattribute__`` and sees only the exposed mapping.  The one
extra, ``__name__``, is "re (sandbox)" rather than "re": when ``from re import
enum`` fails, CPython falls back to ``sys.modules[__name__ + ".enum"]``, and
the real name would hand out the real submodule (``collections.abc``).
"""

from __future__ import annotations

import encodings
import importlib
import pkgutil
import sys
import types
from collections.abc import Mapping

from rlm_sandbox.facades import EXPAT_LIMITS_AMPLIFICATION, STAND_INS

__all__ = [
    "ALLOWED_MODULES",
    "IMPORTABLE",
    "ModuleProxy",
    "guarded_import",
    "import_module",
    "is_forbidden_value",
    "is_metaclass",
    "plain_str",
    "refusal",
    "replace_attributes",
    "standard_codecs",
]

#: The data modules of the standard library whose doors (files, processes, the
#: host's identity) are withheld or replaced (``facades.py``).
_DATA_MODULES = frozenset({
    "base64", "binascii", "calendar", "codecs", "contextlib", "csv", "fnmatch", "gzip",
    "hashlib", "html", "html.parser", "io", "pprint", "shlex", "struct", "urllib",
    "urllib.parse", "uuid", "zlib", "zoneinfo",
})
#: ElementTree only where libexpat bounds entity expansion itself.
_XML_MODULES = frozenset({"xml", "xml.etree", "xml.etree.ElementTree"})

#: Modules model code may import (and their submodules listed here).
ALLOWED_MODULES = frozenset({
    "bisect", "collections", "collections.abc", "copy", "dataclasses", "datetime", "decimal",
    "difflib", "enum", "fractions", "functools", "heapq", "itertools", "json", "math",
    "operator", "random", "re", "statistics", "string", "textwrap", "typing", "unicodedata",
    # datetime.strftime imports time from C through the sandbox's __import__.
    "time",
}) | _DATA_MODULES | (_XML_MODULES if EXPAT_LIMITS_AMPLIFICATION else frozenset())

def standard_codecs() -> list[str]:
    """The modules of the standard library's ``encodings`` package: every codec Python
    ships (shift_jis, cp1251, koi8_r, bz2 ...), and a few modules that are not codecs
    here (``aliases``; ``mbcs`` and ``oem`` off Windows).  A codec's module is imported
    at its first use, which a hardened sandbox may no longer do (the dropped uid may not
    read the interpreter's directory), so the sandbox looks each up first."""
    return sorted(info.name for info in pkgutil.iter_modules(encodings.__path__))


#: Packages imported only for a submodule (``import urllib.parse``); not listed to the model.
_PACKAGES_ONLY = frozenset({"urllib", "xml", "xml.etree"})

#: The allowed modules as model code names them, for messages and the docs.
IMPORTABLE = tuple(sorted(ALLOWED_MODULES - _PACKAGES_ONLY))

#: Submodules reachable as attributes of their parent's proxy (``collections.abc``).
_SUBMODULES: dict[str, tuple[str, ...]] = {
    "collections": ("abc",), "html": ("parser",), "urllib": ("parse",), "xml": ("etree",),
    "xml.etree": ("ElementTree",),
}

#: For these modules only the listed names are exposed.
ONLY_ATTRIBUTES: dict[str, frozenset[str]] = {
    # copy.dispatch_table is copyreg's: a reducer registered there makes
    # copy() call setattr(any object, any name, any value).
    "copy": frozenset({"copy", "deepcopy", "Error", "error"}),
    # open, open_code and FileIO open files; the buffered and text wrappers
    # take raw file objects; memory files are all model code needs.
    "io": frozenset({"StringIO", "BytesIO", "SEEK_SET", "SEEK_CUR", "SEEK_END",
                     "UnsupportedOperation"}),
    # GzipFile(name) and open() open files; its instances lead to the class.
    "gzip": frozenset({"compress", "decompress", "BadGzipFile"}),
    # A shlex lexer opens the file named after its `source` keyword.
    "shlex": frozenset({"split", "join", "quote"}),
    # getnode() runs ip/ifconfig or asks libuuid for the host's address.
    "uuid": frozenset({
        "UUID", "SafeUUID", "uuid1", "uuid3", "uuid4", "uuid5", "NAMESPACE_DNS",
        "NAMESPACE_OID", "NAMESPACE_URL", "NAMESPACE_X500", "RESERVED_FUTURE",
        "RESERVED_MICROSOFT", "RESERVED_NCS", "RFC_4122",
    }),
    # Decoding and encoding in memory: not open/EncodedFile (files), nor
    # register/register_error, which change how the whole process decodes, nor
    # the stream classes (facades.py says why).
    "codecs": frozenset({
        "decode", "encode", "lookup", "lookup_error", "getdecoder", "getencoder",
        "getincrementaldecoder", "getincrementalencoder", "iterdecode", "iterencode",
        "CodecInfo", "Codec", "IncrementalDecoder", "IncrementalEncoder", "BOM", "BOM_BE",
        "BOM_LE", "BOM_UTF8", "BOM_UTF16", "BOM_UTF16_BE", "BOM_UTF16_LE", "BOM_UTF32",
        "BOM_UTF32_BE", "BOM_UTF32_LE", "strict_errors", "ignore_errors", "replace_errors",
        "backslashreplace_errors", "xmlcharrefreplace_errors", "namereplace_errors",
    }),
}

#: For these modules only the names of their ``__all__`` are exposed (less any
#: excluded below): not their command-line ``main``, deprecated helpers or imports.
_PUBLIC_API_ONLY = frozenset({
    "base64", "calendar", "contextlib", "csv", "fnmatch", "hashlib", "html", "html.parser",
    "pprint", "urllib.parse", "xml.etree.ElementTree", "zoneinfo",
})

#: Public attributes withheld even though their values are not modules.
EXCLUDED_ATTRIBUTES: dict[str, frozenset[str]] = {
    # Formatter.get_field walks attributes named in the format string.
    "string": frozenset({"Formatter"}),
    # UserString.format/format_map are plain Python methods that call the real
    # str.format on the wrapped text: a route around the guarded formatter.
    "collections": frozenset({"UserString"}),
    # update_wrapper/wraps read and write attributes named by the caller (a
    # route to a function's __globals__); singledispatch evaluates string
    # annotations with eval(); the rest is plumbing nobody analysing text needs.
    "functools": frozenset({
        "update_wrapper", "wraps", "singledispatch", "singledispatchmethod",
        "RLock", "get_cache_token",
    }),
    # get_type_hints eval()s string annotations with real builtins; the others
    # set attributes on whatever they are given, or print to the real stderr.
    "typing": frozenset({
        "get_type_hints", "no_type_check", "no_type_check_decorator", "reveal_type",
        "dataclass_transform", "get_overloads", "clear_overloads",
    }),
    # make_dataclass copies a caller's namespace (any dunder) into a new class
    # and pastes field names into the source it exec()s.
    "dataclasses": frozenset({"make_dataclass"}),
    # global_enum writes members into sys.modules[cls.__module__].__dict__.
    "enum": frozenset({
        "global_enum", "global_enum_repr", "global_flag_repr", "global_str",
        "pickle_by_enum_name", "pickle_by_global_name",
    }),
    # chdir changes the working directory; ExitStack.push hands its callbacks the
    # traceback (a class statement's __exit__ never gets one); the async ones
    # need an event loop the sandbox does not run.
    "contextlib": frozenset({
        "chdir", "ExitStack", "AsyncExitStack", "asynccontextmanager", "aclosing",
        "AbstractAsyncContextManager",
    }),
    # The Locale* calendars switch the process's locale, which reads locale files.
    "calendar": frozenset({"LocaleTextCalendar", "LocaleHTMLCalendar"}),
    # reset_tzpath points ZoneInfo at any directory (keys are read only below
    # TZPATH); available_timezones opens every file there, through importlib.
    "zoneinfo": frozenset({"reset_tzpath", "available_timezones"}),
}

#: What to use instead of a withheld attribute, added to its AttributeError.
ATTRIBUTE_HINTS: dict[tuple[str, str], str] = {
    **{("io", name): "use io.StringIO(text) or io.BytesIO(data): the sandbox has no files"
       for name in ("open", "open_code", "FileIO", "TextIOWrapper", "BufferedReader")},
    ("gzip", "open"): "use gzip.decompress(data): the sandbox has no files",
    ("gzip", "GzipFile"): "use gzip.decompress(data) or gzip.compress(data)",
    **{("codecs", name): "use codecs.decode(data, encoding) or codecs.iterdecode(chunks, "
                         "encoding)" for name in ("open", "getreader", "StreamReader")},
    ("shlex", "shlex"): "use shlex.split(text)",
    ("uuid", "getnode"): "the host's address stays outside; uuid1() uses a random node",
    ("contextlib", "ExitStack"): "use nested with statements",
    ("contextlib", "chdir"): "the sandbox has no files",
    **{("zoneinfo", name): "ZoneInfo(key) takes an IANA key such as 'Europe/Paris'"
       for name in ("reset_tzpath", "available_timezones")},
}

#: Guarded stand-ins: ``facades.py``'s, and those the policy registers before any
#: proxy is built.
_REPLACEMENTS: dict[str, dict[str, object]] = {
    name: dict(values) for name, values in STAND_INS.items()}

_NO_FILES = "there are no files here: the input is `context`, print() writes the output"
_NO_NETWORK = "there is no network here; ask a sub-model with llm_query"
_NOT_INSTALLED = "third-party packages are not installed"

#: What to use instead of a refused module, by its full or top-level name.
SUBSTITUTES: dict[str, str] = {
    **dict.fromkeys(("os", "pathlib", "shutil", "glob", "tempfile", "fileinput", "sys"),
                    _NO_FILES),
    **dict.fromkeys(("subprocess", "multiprocessing", "threading", "concurrent", "asyncio",
                     "signal"), "no processes or threads run here; run sub-queries in "
                                "parallel with llm_query_batched"),
    **dict.fromkeys(("socket", "ssl", "http", "urllib.request", "urllib.error", "ftplib",
                     "smtplib", "requests", "httpx", "aiohttp"), _NO_NETWORK),
    **dict.fromkeys(("pickle", "shelve", "marshal"), "use json"),
    **dict.fromkeys(("numpy", "pandas", "scipy", "polars"),
                    f"{_NOT_INSTALLED}; use statistics, math, collections and csv"),
    **dict.fromkeys(("bs4", "lxml", "html5lib"),
                    f"{_NOT_INSTALLED}; use html.parser or xml.etree.ElementTree"),
    **dict.fromkeys(("xml.dom", "xml.sax", "xml.parsers", "xml.etree.cElementTree"),
                    "use xml.etree.ElementTree"),
    **dict.fromkeys(("dateutil", "pytz", "arrow"), f"{_NOT_INSTALLED}; use datetime and zoneinfo"),
    "html.entities": "use html.unescape",
    **dict.fromkeys(("bz2", "lzma", "zipfile", "tarfile"), "use zlib or gzip, in memory"),
    "regex": f"{_NOT_INSTALLED}; use re",
    "secrets": "use random, uuid.uuid4() or hashlib",
    "logging": "use print()",
    **dict.fromkeys(("StringIO", "cStringIO"), "use io.StringIO"),
    **({} if EXPAT_LIMITS_AMPLIFICATION else {"xml.etree.ElementTree": (
        "this Python's libexpat is older than 2.4.0, which bounds entity expansion")}),
}

#: Interpreter plumbing: constructors of functions, methods and descriptors,
#: and GenericAlias, which forwards attribute reads to any object it wraps.
_PLUMBING: tuple[object, ...] = (
    types.GenericAlias, types.FunctionType, types.MethodType, types.BuiltinFunctionType,
    types.MethodWrapperType, types.WrapperDescriptorType, types.MethodDescriptorType,
    types.ClassMethodDescriptorType, types.GetSetDescriptorType, types.MemberDescriptorType,
    types.CellType,
)

_FORBIDDEN_TYPES: tuple[type, ...] = (
    types.ModuleType,
    types.FrameType,
    types.CodeType,
    types.TracebackType,
)


def plain_str(value: object, what: str) -> str:
    """``value`` as an exact ``str``, or TypeError.

    Guards must never call methods of a str subclass from model code: it could
    override ``startswith`` or ``__contains__`` and lie about its content.
    """
    if type(value) is str:
        return value
    if isinstance(value, str):
        return str.__str__(value)  # an exact copy, made without calling model code
    raise TypeError(f"{what} must be a str, not {type(value).__name__}")


def is_metaclass(value: object) -> bool:
    """True for ``type`` and its subclasses (EnumType, ABCMeta ...).

    Calling a metaclass builds a class from any namespace, dunders included,
    past the checks a class statement gets.
    """
    return issubclass(type(value), type) and type in type.__dict__["__mro__"].__get__(value)


def is_forbidden_value(value: object) -> bool:
    """True for objects model code must never hold.

    Modules, frames, code objects, tracebacks, C capsules, metaclasses and
    namespace dicts (a dict holding ``__builtins__`` is some function's or
    module's globals).
    """
    if isinstance(value, _FORBIDDEN_TYPES):
        return True
    kind = type(value)
    if issubclass(kind, type):
        return is_metaclass(value)
    if kind.__name__ == "PyCapsule" and kind.__module__ == "builtins":
        return True
    return type(value) is dict and "__builtins__" in value


class ModuleProxy:
    """An immutable, attribute-only view of a module's safe public names."""

    __slots__ = ("_proxy_label", "_proxy_names")

    def __init__(self, label: str, names: Mapping[str, object]) -> None:
        object.__setattr__(self, "_proxy_label", label)
        object.__setattr__(self, "_proxy_names", types.MappingProxyType(dict(names)))

    def __getattribute__(self, name: str) -> object:
        names: Mapping[str, object] = object.__getattribute__(self, "_proxy_names")
        try:
            return names[name]
        except KeyError:
            label = object.__getattribute__(self, "_proxy_label")
        if name == "__name__":
            # Read only by CPython's `from X import missing` error path: no
            # "re (sandbox).enum" key exists in sys.modules, so the fallback
            # lookup fails and the ImportError names the module.
            return f"{label} (sandbox)"
        raise AttributeError(f"module {label!r} has no attribute {name!r} in the sandbox"
                             f"{_hint(ATTRIBUTE_HINTS.get((label, name)))}")

    def __setattr__(self, name: str, value: object) -> None:
        raise TypeError("sandbox modules are read-only")

    def __delattr__(self, name: str) -> None:
        raise TypeError("sandbox modules are read-only")

    def __repr__(self) -> str:
        return f"<sandbox module {object.__getattribute__(self, '_proxy_label')!r}>"

    def __dir__(self) -> list[str]:
        names: Mapping[str, object] = object.__getattribute__(self, "_proxy_names")
        return sorted(names)


_PROXIES: dict[str, ModuleProxy] = {}


def replace_attributes(module: str, values: Mapping[str, object]) -> None:
    """Expose ``values`` instead of the module's own attributes of those names.

    Called by the policy at import time, before any proxy of ``module`` exists.
    """
    if module in _PROXIES:
        raise RuntimeError(f"the proxy of {module!r} was built before its replacements")
    _REPLACEMENTS.setdefault(module, {}).update(values)


def _hint(text: str | None) -> str:
    return f"; {text}" if text else ""


def _exposed_names(name: str, module: types.ModuleType) -> dict[str, object]:
    excluded = EXCLUDED_ATTRIBUTES.get(name, frozenset())
    only = ONLY_ATTRIBUTES.get(name)
    if name in _PUBLIC_API_ONLY:
        only = frozenset(module.__all__)
    replaced = _REPLACEMENTS.get(name, {})
    exposed: dict[str, object] = {}
    for attr in dir(module):
        if attr.startswith("_") or attr in excluded or (only is not None and attr not in only):
            continue
        value = replaced.get(attr, getattr(module, attr))
        if not is_forbidden_value(value) and not any(value is p for p in _PLUMBING):
            exposed[attr] = value
    for sub in _SUBMODULES.get(name, ()):
        exposed[sub] = import_module(f"{name}.{sub}")
    return exposed


def import_module(name: str) -> ModuleProxy:
    """Return the (cached) proxy of an allowed module; ImportError otherwise."""
    proxy = _PROXIES.get(name)
    if proxy is not None:
        return proxy
    if name not in ALLOWED_MODULES:
        raise ImportError(refusal(name))
    module = importlib.import_module(name)
    proxy = ModuleProxy(name, _exposed_names(name, module))
    _PROXIES[name] = proxy
    return proxy


def refusal(name: str) -> str:
    """Why ``name`` cannot be imported: what to use instead, and what can be."""
    hint = SUBSTITUTES.get(name) or SUBSTITUTES.get(name.partition(".")[0])
    if hint is None and name.partition(".")[0] not in sys.stdlib_module_names:
        hint = _NOT_INSTALLED
    return (f"import of {name!r} is not allowed in the sandbox{_hint(hint)}. "
            f"Allowed: {', '.join(IMPORTABLE)}")


def _check_fromlist(name: str, proxy: ModuleProxy, fromlist: tuple[str, ...] | list[str]) -> None:
    """``from X import Y`` of a withheld Y: CPython would turn the proxy's
    AttributeError into a bare "cannot import name"; this keeps the hint."""
    names: Mapping[str, object] = object.__getattribute__(proxy, "_proxy_names")
    for attr in fromlist:
        if attr != "*" and type(attr) is str and attr not in names:
            raise ImportError(f"cannot import name {attr!r} from {name!r} in the sandbox"
                              f"{_hint(ATTRIBUTE_HINTS.get((name, attr)))}")


def guarded_import(
    name: str,
    globals: Mapping[str, object] | None = None,
    locals: Mapping[str, object] | None = None,
    fromlist: tuple[str, ...] | list[str] | None = (),
    level: int = 0,
) -> object:
    """The ``__import__`` seen by model code: allow-listed modules only.

    ``import collections.abc`` binds the ``collections`` proxy (whose ``abc``
    is the submodule's proxy); ``from collections.abc import X`` gets the
    submodule's proxy, as in plain Python.

    C functions also import through it (``datetime.strptime`` and
    ``time.strptime`` run ``import _strptime`` in the caller's builtins).  Those
    few internal modules are handed over as they are: model code cannot name
    them (names starting with ``_`` do not compile, and ``__import__`` is not
    reachable by name), so only the interpreter's own C code ever asks.
    """
    if level != 0:
        raise ImportError("relative imports are not allowed in the sandbox")
    name = plain_str(name, "module name")
    if name in C_INTERNAL_IMPORTS and not fromlist:
        return sys.modules[name]
    if "." in name and not fromlist:
        import_module(name)  # refuses what is not allowed
        return import_module(name.partition(".")[0])
    proxy = import_module(name)
    if fromlist:
        _check_fromlist(name, proxy, fromlist)
    return proxy


#: Modules that C code in allowed modules imports at call time.  They are
#: imported here, when the sandbox starts and before it is hardened, so they
#: are in ``sys.modules`` and need no file access later.
C_INTERNAL_IMPORTS = frozenset({"_strptime"})
for _name in C_INTERNAL_IMPORTS:
    importlib.import_module(_name)
