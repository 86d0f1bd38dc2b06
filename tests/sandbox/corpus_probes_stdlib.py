"""Attacks through the standard library's data modules, by route: each must be refused
(see sandbox_corpus.py).  Their bombs and the doors that need a closer look than "it
failed" are in test_security_stdlib.py."""

from __future__ import annotations

_ET = "import xml.etree.ElementTree as ET\n"
_CM = "import contextlib\n@contextlib.contextmanager\ndef cm():\n    yield 1\nc = cm()\n"

#: Attacks by route.  Each must fail with an error (and leak nothing).
STDLIB_PROBES: dict[str, list[str]] = {
    "file doors of io, codecs and gzip": [
        "import io\nprint(io.open('/etc/passwd').read())",
        "import io\nprint(io.FileIO('/etc/passwd').read())",
        "from io import open\nprint(open('/etc/hostname').read())",
        "from io import FileIO",
        "import io\nio.open_code('/etc/passwd')",
        "import io\nio.TextIOWrapper(io.BytesIO(b'x'))",
        "import io\nprint(io.BufferedReader)",
        "import codecs\nprint(codecs.open('/etc/passwd').read())",
        "from codecs import open",
        "import codecs, io\ncodecs.EncodedFile(io.BytesIO(), 'utf-8')",
        "import gzip\ngzip.open('/etc/passwd')",
        "import gzip\ngzip.GzipFile('/etc/passwd')",
        "from gzip import GzipFile",
        "import gzip\ngzip.main()",
        "import base64\nbase64.main()",
        "import calendar\ncalendar.main(['calendar'])",
    ],
    "file doors of ElementTree": [
        _ET + "ET.parse('/etc/passwd')",
        _ET + "ET.parse(b'/etc/passwd')",
        _ET + "ET.parse(3)",
        _ET + "class P(str):\n    pass\nET.parse(P('/etc/passwd'))",
        _ET + "ET.ElementTree(file='/etc/passwd')",
        _ET + "ET.ElementTree().parse('/etc/hostname')",
        _ET + "print(list(ET.iterparse('/etc/passwd')))",
        _ET + "print(ET.canonicalize(from_file='/etc/passwd'))",
        _ET + "ET.ElementTree(ET.Element('a')).write('/tmp/rlm-probe.xml')",
        _ET + "ET.ElementTree(ET.Element('a')).write(4)",
        _ET + "ET.ElementTree(ET.Element('a')).write_c14n('/tmp/rlm-probe.xml')",
        # a `read` that exists for the facade's check and is gone for the stdlib's
        _ET + "class F:\n    calls = 0\n    @property\n    def read(self):\n"
        "        F.calls += 1\n        if F.calls > 1:\n            raise AttributeError('read')\n"
        "        return lambda n: ''\nET.parse(F())",
        _ET + "class S(str):\n    @property\n    def read(self):\n"
        "        raise AttributeError('read')\nET.iterparse(S('/etc/passwd'))",
        "import contextlib\n" + _ET + "with contextlib.redirect_stdout(4):\n"
        "    ET.dump(ET.Element('a'))",
        _ET + "class T(ET.ElementTree):\n    pass",
        _ET + "t = ET.ElementTree(ET.Element('a'))\nprint(t._tree)",
        _ET + "print(ET.ElementTree.mro()[1].parse)",
        _ET + "print(ET.parse.__globals__)",
        _ET + "print(ET.XMLParser()._parse_whole)",
        _ET + "print(ET.XMLPullParser()._parser)",
    ],
    "file doors of zoneinfo, shlex and contextlib": [
        "import zoneinfo\nzoneinfo.reset_tzpath(['/etc'])",
        "from zoneinfo import reset_tzpath",
        "import zoneinfo\nprint(len(zoneinfo.available_timezones()))",
        "import zoneinfo\nzoneinfo.ZoneInfo('/etc/passwd')",
        "import zoneinfo\nzoneinfo.ZoneInfo('../../../../etc/passwd')",
        "import zoneinfo\nzoneinfo.ZoneInfo('Europe/../../../etc/passwd')",
        "import zoneinfo\nzoneinfo.ZoneInfo.from_file('/etc/localtime')",
        "import shlex\nprint(shlex.shlex)",
        "from shlex import shlex",
        "import shlex\nprint(shlex.split.__globals__)",
        "from contextlib import chdir",
        "import contextlib\ncontextlib.chdir('/')",
        "import calendar\nprint(calendar.LocaleTextCalendar(locale='C').formatmonth(2024, 1))",
        "import calendar\nprint(calendar.different_locale)",
    ],
    "host identity, processes and network": [
        "import uuid\nprint(uuid.getnode())",
        "from uuid import getnode",
        "import uuid\nprint(uuid._ip_getnode())",
        "import uuid\nprint(uuid._generate_time_safe)",
        "import urllib.request",
        "from urllib import request",
        "import urllib\nprint(urllib.request)",
        "import urllib.parse\nprint(urllib.parse.sys)",
        "import http.client",
        "import socket",
        "import subprocess",
    ],
    "other xml parsers and interpreter modules": [
        "import xml.dom.minidom",
        "from xml.dom import minidom",
        "import xml.sax",
        "import xml.parsers.expat",
        "from xml.parsers import expat",
        "import xml.etree.ElementInclude",
        "from xml.etree import ElementInclude",
        "import xml.etree.cElementTree",
        "import xml\nprint(xml.dom)",
        "import html.entities",
        "import types",
        "import inspect",
        "import gc",
        "import sys",
        "import importlib",
        "from importlib import import_module",
        # preloaded for zoneinfo, never handed out
        "import importlib.resources",
        "from importlib import resources",
        "import importlib.resources as r\nprint(r.files)",
        "import ctypes",
        "import builtins",
        "import io\nprint(io.sys)",
        "import csv\nprint(csv.re)",
    ],
    "codec registry and stream classes": [
        # a stream reader forwards any attribute, private ones too, to what it wraps
        "import codecs, random\nclass M(codecs.getreader('utf-8')):\n    pass\n"
        "print(M(random.Random())._randbelow)",
        "import codecs, random\nclass M(codecs.lookup('utf-8').streamreader):\n    pass\n"
        "print(M(random.Random())._randbelow)",
        "import codecs\nclass M(codecs.lookup('utf-8')[2]):\n    pass",
        "import codecs\nclass M(codecs.StreamReader):\n    pass",
        "from codecs import StreamWriter",
        "import codecs\ncodecs.register(lambda name: None)",
        "import codecs\ncodecs.register_error('x', print)",
        "import codecs\ncodecs.unregister(print)",
        "import codecs\nprint(codecs.lookup('utf-8')._is_text_encoding)",
    ],
    "generators, frames and tracebacks through contextlib": [
        _CM + "print(c.gen.gi_frame)",
        _CM + "print(c.gen.gi_code)",
        _CM + "print(getattr(c.gen, 'gi_frame').f_globals)",
        _CM + "print(c.func.__code__)",
        _CM + "print(c._recreate_cm)",
        "import contextlib\n@contextlib.contextmanager\ndef cm():\n    try:\n        yield\n"
        "    except ZeroDivisionError as e:\n        print(e.__traceback__)\nwith cm():\n    1 / 0",
        "import contextlib\nwith contextlib.ExitStack() as s:\n"
        "    s.push(lambda *a: print(a[2].tb_frame))\n    1 / 0",
        "from contextlib import ExitStack",
        # the real redirections swap the sys attribute a subclass names: sys.modules
        "import contextlib\nclass R(contextlib.redirect_stdout):\n    _stream = 'modules'\n"
        "r = R(None)\nr.__enter__()\nmods = r._old_targets[0]\nr.__exit__(None, None, None)\n"
        "print(mods['os'])",
        "import contextlib\nR = type(contextlib.redirect_stderr(None))\nclass S(R):\n"
        "    _stream = 'modules'",
        "import contextlib\nprint(contextlib.redirect_stdout(None)._redirect)",
        "import contextlib\nprint(contextlib.redirect_stdout(None).__enter__.__self__)",
        "from contextlib import AsyncExitStack",
        "import contextlib\nclass C(contextlib.AbstractContextManager):\n"
        "    def __exit__(self, t, e, tb):\n        print(tb.tb_frame)\n"
        "with C():\n    1 / 0",
    ],
    "print to a stream": [
        # print(file=) reads the stream's methods through the guard: host objects
        # have no write of theirs to hand out
        "import io\nprint('x', file=io)",
        "import contextlib\nprint('x', file=contextlib.redirect_stdout(None))",
        "print('x', file=print)",
        "print('x', file=llm_query)",
    ],
    "pprint and csv internals": [
        "import pprint\nprint(pprint.PrettyPrinter._dispatch)",
        "import pprint\nprint(pprint.PrettyPrinter()._stream)",
        "import pprint\nclass P(pprint.PrettyPrinter):\n    def f(self):\n"
        "        return self._dispatch\nprint(P().f())",
        "import pprint\nprint(pprint.pformat.__globals__)",
        "import pprint\nl = []\nfor i in range(100000):\n    l = [l]\npprint.pformat(l)",
        "import csv\nprint(csv.Dialect._validate)",
        "import csv\nprint(csv.excel.__dict__)",
        "import csv\nclass D(csv.Dialect):\n    def f(self):\n        return self._validate\n"
        "print(D.f(D))",
        "import csv\nprint(csv.DictReader.__init__.__globals__)",
        "import csv\nclass D(csv.Dialect):\n    __init_subclass__ = print",
        "from html.parser import HTMLParser\nprint(HTMLParser.mro()[1].__dict__)",
        "from html.parser import HTMLParser\nclass P(HTMLParser):\n    def f(self):\n"
        "        return self._parse_doctype_subset\nprint(P().f())",
    ],
}
