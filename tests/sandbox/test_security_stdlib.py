"""Security suite, the standard library's data modules: bombs end in errors, doors stay shut.

An entity-expansion document and a decompression bomb end in an error within the
step's limits and the sandbox goes on serving; the file doors are shut by the
language layer itself (the OS layers behind it are not what refuses them); the
host's hardware address and other processes' files stay out of reach.
"""

from __future__ import annotations

import base64
import bz2
import uuid
import zlib

import pytest

from tests.sandbox.security_harness import open_sandbox

_ET = "import io\nimport xml.etree.ElementTree as ET\n"


def billion_laughs(levels: int = 10) -> str:
    entities = ['<!ENTITY lol0 "lol">'] + [
        f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10}">' for i in range(1, levels)]
    return (f'<?xml version="1.0"?><!DOCTYPE lolz [{"".join(entities)}]>'
            f"<lolz>&lol{levels - 1};</lolz>")


def quadratic_blowup() -> str:
    """One large entity referenced many times: no nesting, the same amplification."""
    return f'<!DOCTYPE r [<!ENTITY a "{"x" * 100_000}">]><r>{"&a;" * 20_000}</r>'


#: Every way into the XML parser, each reading the document from ``context``.
XML_ROUTES = {
    "fromstring": _ET + "ET.fromstring(context)",
    "XMLParser.feed": _ET + "p = ET.XMLParser()\nfor i in range(0, len(context), 4096):\n"
                            "    p.feed(context[i:i + 4096])\np.close()",
    "XMLPullParser": _ET + "p = ET.XMLPullParser(['end'])\np.feed(context)\n"
                           "print(len(list(p.read_events())))\np.close()",
    "iterparse": _ET + "print(sum(1 for _ in ET.iterparse(io.BytesIO(context.encode()))))",
    "parse": _ET + "ET.parse(io.StringIO(context))",
}


@pytest.mark.parametrize("document", [billion_laughs(), quadratic_blowup()],
                         ids=["billion laughs", "quadratic blowup"])
async def test_entity_expansion_bombs_end_in_a_parse_error(document: str) -> None:
    async with open_sandbox(document, memory_bytes=256 << 20) as box:
        for route, code in XML_ROUTES.items():
            result = await box.run(code, limit=20)
            assert not result.ok, route
            assert result.error is not None and "ParseError" in result.error, result.error
            assert "amplification" in result.error, result.error
        assert await box.ok("print('alive')") == "alive\n"


def deflate_bomb(mebibytes: int, wbits: int) -> bytes:
    """Compressed data of ``mebibytes`` MiB of zeros, made without compressing them all:
    after a full flush each MiB compresses to the same block, which is repeated.  Its
    checksum does not match: the data ends in an error even where memory is plenty."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, wbits)
    chunk = bytes(1 << 20)
    first = compressor.compress(chunk) + compressor.flush(zlib.Z_FULL_FLUSH)
    block = compressor.compress(chunk) + compressor.flush(zlib.Z_FULL_FLUSH)
    return first + block * (mebibytes - 1) + compressor.flush()


#: Every way to inflate in memory; ``data`` is the bomb, decoded from ``context``.
INFLATE_ROUTES = {
    "zlib.decompress": "x = zlib.decompress(data)",
    "zlib.decompressobj": "x = zlib.decompressobj().decompress(data)",
    "gzip.decompress": "x = gzip.decompress(gz)",
    "codecs zlib": "x = codecs.decode(data, 'zlib')",
    "codecs bz2": "x = codecs.decode(bz, 'bz2')",
    "a streaming loop": "d = zlib.decompressobj(31)\nparts = []\n"
                        "for i in range(0, len(gz), 4096):\n"
                        "    parts.append(d.decompress(gz[i:i + 4096]))",
}


async def test_decompression_bombs_end_in_memory_error_within_the_memory_cap() -> None:
    # bz2 reads concatenated streams as one: 512 MiB of zeros in about 1.5 KB.
    bombs = {"zlib": deflate_bomb(1024, 15), "gzip": deflate_bomb(1024, 31),
             "bz2": bz2.compress(bytes(16 << 20)) * 32}
    context = "\n".join(base64.b64encode(bomb).decode() for bomb in bombs.values())
    async with open_sandbox(context, memory_bytes=256 << 20) as box:
        await box.ok("import base64, codecs, gzip, zlib\n"
                     "data, gz, bz = [base64.b64decode(line) for line in context.splitlines()]")
        for route, code in INFLATE_ROUTES.items():
            result = await box.run(code, limit=30)
            assert not result.ok, route
            assert result.error is not None and "MemoryError" in result.error, (route, result.error)
            await box.ok("x = parts = None")
        assert await box.ok("print(len(data) < 2_000_000, 'alive')") == "True alive\n"


#: File doors and what the refusal must say: the language layer refuses them, before
#: Landlock or the uid drop would (their errors name errno, not the substitute).
FILE_DOORS = {
    "import io\nio.open('/etc/hostname')": "io.StringIO",
    "from io import FileIO": "io.StringIO",
    "import codecs\ncodecs.open('/etc/hostname')": "codecs.decode",
    "import gzip\ngzip.open('/etc/hostname')": "gzip.decompress",
    _ET + "ET.parse('/etc/hostname')": "no files",
    _ET + "ET.ElementTree().parse(b'/etc/hostname')": "no files",
    _ET + "ET.iterparse('/etc/hostname')": "no files",
    _ET + "ET.canonicalize(from_file='/etc/hostname')": "no files",
    _ET + "ET.ElementTree(ET.Element('a')).write('/tmp/rlm-probe.xml')": "no files",
    _ET + "ET.ElementTree(ET.Element('a')).write(5)": "no files",
    "import contextlib\n" + _ET + "with contextlib.redirect_stdout(4):\n"
    "    ET.dump(ET.Element('a'))": "no files",
    "import zoneinfo\nzoneinfo.reset_tzpath(['/etc'])": "ZoneInfo(key)",
    "import shlex\nshlex.shlex('source /etc/hostname')": "shlex.split",
    "import uuid\nuuid.getnode()": "random node",
    "import os": "no files",
    "import pandas": "csv",
}


async def test_file_doors_are_shut_by_the_language_layer() -> None:
    async with open_sandbox() as box:
        for code, hint in FILE_DOORS.items():
            error = await box.fails(code, hint)
            assert "Errno" not in error and "Permission" not in error, error
        assert await box.ok("print('alive')") == "alive\n"


async def test_uuid1_carries_a_random_node_never_the_hosts_address() -> None:
    async with open_sandbox() as box:
        output = await box.ok("import uuid\nprint(uuid.uuid1().node, uuid.uuid1().node)")
    first, second = (int(word) for word in output.split())
    assert first != second
    assert first & (1 << 40) and second & (1 << 40)  # the multicast bit of a random node
    assert uuid.getnode() not in (first, second)


async def test_a_zoneinfo_subclass_cannot_point_its_reads_elsewhere() -> None:
    async with open_sandbox() as box:
        output = await box.ok(
            "import zoneinfo\nclass Z(zoneinfo.ZoneInfo):\n"
            "    def _find_tzfile(self, key):\n        return '/etc/passwd'\n"
            "print(Z.no_cache('Europe/Paris').key, zoneinfo.ZoneInfo('UTC').utcoffset(None))")
    assert output == "Europe/Paris 0:00:00\n"


async def test_codec_lookups_carry_no_stream_classes() -> None:
    async with open_sandbox() as box:
        output = await box.ok(
            "import codecs\ni = codecs.lookup('UTF8')\n"
            "print(i.name, i.streamreader, i.streamwriter, i[2:4], i.decode(b'x'))")
    assert output == "utf-8 None None (None, None) ('x', 1)\n"


async def test_a_block_leaving_the_streams_redirected_does_not_redirect_the_next() -> None:
    async with open_sandbox() as box:
        await box.ok("import contextlib, io, pprint\nbuf = io.StringIO()\n"
                     "contextlib.redirect_stdout(buf).__enter__()\n"
                     "contextlib.redirect_stderr(buf).__enter__()\nprint('to buf')")
        assert await box.ok("pprint.pprint({'a': 1})\nprint(repr(buf.getvalue()))") \
            == "{'a': 1}\n'to buf\\n'\n"
