"""Ordinary analysis code, part 3: the standard library's data modules (csv, io, html.parser,
xml.etree.ElementTree, urllib.parse, hashlib, base64, pprint, calendar, zoneinfo, uuid,
zlib/gzip, struct, binascii, contextlib, shlex, fnmatch, codecs).

Each snippet prints; test_sandbox_corpus.py runs it in a hardened sandbox and in plain
Python and wants the same output.  Snippets leave no state behind in plain Python (no
registered dialects or namespaces), print nothing random, and read ``context`` only
as sandbox_corpus.CONTEXT.
"""

from __future__ import annotations

ORDINARY_STDLIB: dict[str, str] = {
    # --- csv and io -----------------------------------------------------------------------
    "csv DictReader over StringIO": """
import csv, io
data = "name,dept,salary\\nalice,eng,120\\nbob,ops,95\\ncarol,eng,130\\n"
rows = list(csv.DictReader(io.StringIO(data)))
by_dept = {}
for r in rows:
    by_dept.setdefault(r["dept"], []).append(int(r["salary"]))
print(len(rows), {d: sum(v) / len(v) for d, v in sorted(by_dept.items())})
print(rows[0])
""",
    "csv writer and DictWriter": """
import csv, io
out = io.StringIO()
w = csv.writer(out, quoting=csv.QUOTE_MINIMAL)
w.writerow(["user", "note"])
w.writerows([("alice", 'said "hi", left'), ("bob", "multi\\nline")])
print(repr(out.getvalue()))
buf = io.StringIO()
dw = csv.DictWriter(buf, fieldnames=["a", "b"], extrasaction="ignore", lineterminator="\\n")
dw.writeheader()
dw.writerow({"a": 1, "b": 2, "c": 3})
print(buf.getvalue(), end="")
""",
    "csv sniffer and dialects": """
import csv
sample = "id;city;pop\\n1;Lyon;522000\\n2;Nice;342000\\n"
dialect = csv.Sniffer().sniff(sample)
print(dialect.delimiter, csv.Sniffer().has_header(sample))
rows = list(csv.reader(sample.splitlines(), dialect))
print(rows[1:], sorted(csv.list_dialects()))
class Pipes(csv.Dialect):
    delimiter = "|"
    quotechar = "'"
    lineterminator = "\\n"
    quoting = csv.QUOTE_MINIMAL
print(list(csv.reader(["a|'b|c'|d"], Pipes)))
""",
    "csv of the context's key=value pairs": """
import csv, io, re
rows = [dict(re.findall(r"(\\w+)=(\\S+)", line)) for line in context.splitlines()[:5]]
out = io.StringIO()
w = csv.DictWriter(out, fieldnames=["user", "action", "size"], restval="", extrasaction="ignore")
w.writeheader()
w.writerows(rows)
print(out.getvalue().replace("\\r\\n", "|"))
""",
    "io StringIO and BytesIO": """
import io
s = io.StringIO("line one\\nline two\\nline three\\n")
print(s.readline().strip(), [l.strip() for l in s], s.tell())
s.seek(0)
print(s.read(4), s.seek(0, io.SEEK_END))
b = io.BytesIO()
b.write(b"\\x00\\x01abc")
b.seek(2)
print(b.read(), b.getvalue(), len(b.getbuffer()))
""",
    "print into a memory file": """
import io
report = io.StringIO()
print("user", "count", sep="\\t", file=report)
for user, count in [("alice", 3), ("bob", 1)]:
    print(user, count, sep="\\t", file=report, flush=True)
print(report.getvalue(), end="")
print("to stdout", file=None)
class Lines:
    def __init__(self):
        self.lines = []
    def write(self, text):
        self.lines.append(text)
sink = Lines()
print("a", 1, file=sink)
print(sink.lines)
try:
    print("x", file=42)
except AttributeError as exc:
    print("AttributeError:", exc)
""",
    # --- html and xml ---------------------------------------------------------------------
    "html.parser link and text extractor": """
from html.parser import HTMLParser
page = '''<html><head><title>Report &amp; notes</title></head>
<body><h1 class="t">Q3</h1><p>See <a href="/a?x=1">this</a> and <a href='https://e.org/b'>that</a>.</p>
<script>var x = "<a href=nope>";</script><br/></body></html>'''
class Extract(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links, self.text, self.tags = [], [], {}
        self._skip = False
    def handle_starttag(self, tag, attrs):
        self.tags[tag] = self.tags.get(tag, 0) + 1
        if tag == "a":
            self.links.append(dict(attrs).get("href"))
        self._skip = tag == "script"
    def handle_endtag(self, tag):
        if tag == "script":
            self._skip = False
    def handle_data(self, data):
        if data.strip() and not self._skip:
            self.text.append(data.strip())
p = Extract()
p.feed(page)
p.close()
print(p.links)
print(p.text)
print(sorted(p.tags.items()))
""",
    "html escape and unescape": """
import html
print(html.escape('<a href="x">Tom & Jerry</a>'))
print(html.unescape("caf&eacute; &lt;3 &#x27;quoted&#39; &nbsp;end"))
""",
    "ElementTree over an RSS feed": """
import xml.etree.ElementTree as ET
feed = '''<?xml version="1.0"?>
<rss version="2.0"><channel><title>News</title>
<item><title>First</title><link>https://e.org/1</link><category>tech</category></item>
<item><title>Second</title><link>https://e.org/2</link><category>sport</category></item>
<item><title>Third</title><link>https://e.org/3</link><category>tech</category></item>
</channel></rss>'''
root = ET.fromstring(feed)
print(root.tag, root.attrib, root.find("channel/title").text)
items = root.findall(".//item")
print([(i.findtext("title"), i.findtext("category")) for i in items])
print(sum(1 for c in root.iter("category") if c.text == "tech"))
print(ET.tostring(items[0], encoding="unicode"))
""",
    "ElementTree namespaces, attributes and building": """
import xml.etree.ElementTree as ET
doc = '''<feed xmlns="http://www.w3.org/2005/Atom" xmlns:m="urn:m">
<entry m:id="7"><title>A</title></entry><entry m:id="9"><title>B</title></entry></feed>'''
ns = {"a": "http://www.w3.org/2005/Atom", "m": "urn:m"}
root = ET.fromstring(doc)
for e in root.findall("a:entry", ns):
    print(e.get("{urn:m}id"), e.find("a:title", ns).text)
report = ET.Element("report", {"n": "2"})
for name in ["x", "y"]:
    ET.SubElement(report, "row", name=name).text = name.upper()
ET.indent(report)
print(ET.tostring(report, encoding="unicode"))
ET.dump(ET.fromstring("<a><b/></a>"))
""",
    "ElementTree parse, write and iterparse with memory files": """
import io
import xml.etree.ElementTree as ET
text = "<log><e level='error'>disk</e><e level='info'>ok</e><e level='error'>net</e></log>"
tree = ET.parse(io.StringIO(text))
root = tree.getroot()
print(root.tag, [e.text for e in tree.iterfind("e[@level='error']")], tree.findtext("e"))
out = io.BytesIO()
tree.write(out, encoding="utf-8", xml_declaration=True)
print(out.getvalue()[:60])
sout = io.StringIO()
ET.ElementTree(root[0]).write(sout, encoding="unicode")
print(sout.getvalue())
source = io.BytesIO(text.encode())
events = [(ev, el.tag) for ev, el in ET.iterparse(source, events=("start", "end"))]
print(events[:3], len(events))
print(ET.canonicalize("<a  z='1'   b='2'><c/></a>"))
""",
    "ElementTree with a small declared entity and a parse error": """
import xml.etree.ElementTree as ET
doc = '<!DOCTYPE r [<!ENTITY co "ACME Corp">]><r><who>&co;</who><who>&co; EU</who></r>'
print([w.text for w in ET.fromstring(doc)])
try:
    ET.fromstring("<a><b></a>")
except ET.ParseError as exc:
    print("ParseError", exc.position)
""",
    # --- urls, hashes, encodings ----------------------------------------------------------
    "urllib.parse on log urls": """
from urllib.parse import (urlparse, parse_qs, parse_qsl, urlencode, quote, unquote, urljoin,
                          urlunparse)
lines = ["GET https://shop.example.com/cart/add?item=42&qty=2&ref=mail HTTP/1.1",
         "GET https://shop.example.com/search?q=red%20shoes&page=3 HTTP/1.1",
         "GET http://blog.example.org/2024/03/post?utm_source=x#comments HTTP/1.1"]
for line in lines:
    u = urlparse(line.split()[1])
    print(u.scheme, u.netloc, u.path, parse_qs(u.query), u.fragment)
u = urlparse("https://user:pw@host.io:8443/a/b;p?x=1")
print(u.hostname, u.port, u.username, u.params, parse_qsl(u.query))
print(urlencode({"q": "a b&c", "n": [1, 2]}, doseq=True), quote("a/b c", safe=""))
print(unquote("%7Euser"))
print(urljoin("https://e.org/docs/a/", "../b?x=1"), urlunparse(u._replace(query="y=2")))
""",
    "hashlib to deduplicate lines": """
import hashlib
lines = context.splitlines() + context.splitlines()[:2]
seen, unique = set(), []
for line in lines:
    digest = hashlib.md5(line.encode()).hexdigest()
    if digest not in seen:
        seen.add(digest)
        unique.append(line)
print(len(lines), len(unique))
print(hashlib.sha256(context.encode()).hexdigest()[:16], hashlib.sha1(b"abc").hexdigest())
h = hashlib.new("sha512")
h.update(b"part one ")
h.update(b"part two")
print(h.name, h.digest_size, h.hexdigest()[:12], hashlib.blake2b(b"x", digest_size=8).hexdigest())
print(hashlib.sha3_256(b"").hexdigest()[:12], "sha256" in hashlib.algorithms_guaranteed)
""",
    "base64 and binascii": """
import base64, binascii, json
token = base64.urlsafe_b64encode(json.dumps({"sub": "alice", "n": 3}).encode()).decode()
print(token, json.loads(base64.urlsafe_b64decode(token)))
print(base64.b64decode("aGVsbG8gd29ybGQ="), base64.b32encode(b"hi"), base64.b16decode("4142"))
print(base64.b85encode(b"data"), base64.a85decode(base64.a85encode(b"xyz")))
print(binascii.hexlify(b"\\x01\\xff", "-"), binascii.unhexlify("cafe"), binascii.crc32(b"abc"))
try:
    base64.b64decode("abc", validate=True)
except binascii.Error as exc:
    print("Error:", exc)
""",
    "codecs decoding": """
import codecs
raw = codecs.BOM_UTF8 + "na\\u00efve caf\\u00e9".encode("utf-8")
bom = codecs.BOM_UTF8
text = raw[len(bom):].decode("utf-8") if raw.startswith(bom) else raw.decode()
print(text, codecs.decode(raw, "utf-8-sig"), codecs.lookup("latin1").name)
print(codecs.decode("48656c6c6f", "hex"), codecs.encode(b"Hello", "hex"))
print(codecs.decode("Uryyb", "rot13"), codecs.decode(b"\\xff\\xfeh\\x00i\\x00", "utf-16"))
print(codecs.encode("\\u00e9", "ascii", "xmlcharrefreplace"))
dec = codecs.getincrementaldecoder("utf-8")()
parts = [dec.decode(b"caf\\xc3"), dec.decode(b"\\xa9!", final=True)]
print(parts, "".join(codecs.iterdecode([b"a\\xc3", b"\\xa9b"], "utf-8")))
print(codecs.decode(codecs.encode(b"zz" * 50, "zlib"), "zlib")[:6])
print(codecs.decode(b"YWJj\\n", "base64"))
""",
    "every codec Python ships, for legacy exports": """
import codecs
samples = {
    "cp1251": "\\u041f\\u0440\\u0438\\u0432\\u0435\\u0442", "koi8_r": "\\u043c\\u0438\\u0440",
    "shift_jis": "\\u6771\\u4eac", "euc-jp": "\\u5927\\u962a", "gbk": "\\u5317\\u4eac",
    "gb18030": "\\u4e0a\\u6d77", "big5": "\\u53f0\\u5317", "euc_kr": "\\uc11c\\uc6b8",
    "iso2022_jp": "\\u65e5\\u672c", "cp437": "\\u2502\\u00e9", "mac_roman": "caf\\u00e9",
    "iso8859_7": "\\u03b1\\u03b2", "cp1256": "\\u0633\\u0644\\u0627\\u0645", "utf-7": "a+b",
    "punycode": "m\\u00fcnchen", "tis_620": "\\u0e44\\u0e17\\u0e22",
}
for name, text in samples.items():
    data = text.encode(name)
    print(name, data, data.decode(name) == text, codecs.lookup(name).name)
print(b"\\xcf\\xf0\\xe8".decode("cp1251"), b"\\x81".decode("shift_jis", "replace"))
for name in ("bz2", "quopri", "uu"):
    packed = codecs.encode(b"tab\\tseparated=values\\n" * 3, name)
    print(name, codecs.decode(packed, name) == b"tab\\tseparated=values\\n" * 3)
print(codecs.encode(b"a=b \\xe9", "quopri"))
""",
    # --- printing and dates ---------------------------------------------------------------
    "pprint nested results": """
import pprint
from dataclasses import dataclass
@dataclass
class Hit:
    user: str
    count: int
summary = {"errors": {"bob": ["disk full"], "alice": ["timeout"]},
           "users": ["carol", "alice", "bob"], "hits": [Hit("alice", 3), Hit("bob", 1)],
           "ratio": 0.4, "nested": {"a": {"b": {"c": {"d": list(range(30))}}}}}
pprint.pprint(summary)
pprint.pprint(summary, width=60, depth=2)
pprint.pp({"z": 1, "a": 2})
print(pprint.pformat(list(range(40)), compact=True, width=50))
pprint.PrettyPrinter(indent=2, sort_dicts=False).pprint({"z": [1, 2], "a": "x"})
rec = [1, 2]
rec.append(rec)
print(pprint.saferepr(rec).split(" with id")[0], pprint.isrecursive(rec))
""",
    "calendar": """
import calendar
print(calendar.monthrange(2024, 2), calendar.isleap(2023), calendar.leapdays(2000, 2025))
print(calendar.day_name[calendar.weekday(2024, 3, 1)], list(calendar.month_abbr)[1:4])
print(calendar.monthcalendar(2024, 2)[0], calendar.timegm((2024, 3, 1, 0, 0, 0)))
print(calendar.TextCalendar(calendar.MONDAY).formatmonth(2024, 3))
calendar.prmonth(2024, 2)
print(calendar.HTMLCalendar().formatmonth(2024, 1).splitlines()[1])
workdays = sum(1 for week in calendar.Calendar().monthdays2calendar(2024, 5)
               for day, wd in week if day and wd < 5)
print("workdays in May 2024:", workdays)
""",
    "zoneinfo": """
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo
paris = ZoneInfo("Europe/Paris")
ts = datetime(2024, 3, 31, 0, 30, tzinfo=paris)
print(ts.isoformat(), ts.tzname(), (ts + timedelta(hours=3)).isoformat())
ny = ts.astimezone(ZoneInfo("America/New_York"))
print(ny.isoformat(), ny.utcoffset(), ZoneInfo("Asia/Tokyo").utcoffset(datetime(2024, 1, 1)))
logged = datetime.fromisoformat("2024-07-01T12:00:00+00:00")
print(logged.astimezone(ZoneInfo("Australia/Sydney")).strftime("%Y-%m-%d %H:%M %Z"))
new_year = datetime(2024, 1, 1, tzinfo=timezone.utc)
print(str(paris), repr(ZoneInfo("UTC")), new_year.astimezone(paris).hour)
try:
    ZoneInfo("Europe/Pariss")
except Exception as exc:
    print(type(exc).__name__, exc)
""",
    "uuid": """
import uuid
ns = uuid.uuid5(uuid.NAMESPACE_URL, "https://e.org/item/1")
print(ns, ns.version, uuid.uuid3(uuid.NAMESPACE_DNS, "e.org"))
u = uuid.UUID("12345678-1234-5678-1234-567812345678")
print(u.hex, u.int % 1000, u.urn, str(u) == "12345678-1234-5678-1234-567812345678")
r = uuid.uuid4()
print(r.version, len(str(r)), r != uuid.uuid4(), uuid.uuid1().version)
ids = {uuid.uuid5(uuid.NAMESPACE_OID, line).hex[:8] for line in context.splitlines()}
print(len(ids))
""",
    # --- compression and binary data ------------------------------------------------------
    "zlib and gzip in memory": """
import base64, gzip, io, zlib
blob = base64.b64encode(gzip.compress(context.encode(), mtime=0)).decode()
text = gzip.decompress(base64.b64decode(blob)).decode()
print(text == context, len(blob) < len(context) * 2)
packed = zlib.compress(b"abc" * 1000, 9)
print(len(packed), zlib.decompress(packed)[:6], zlib.crc32(b"abc"), zlib.adler32(b"abc"))
d = zlib.decompressobj()
chunks = [d.decompress(packed[i:i + 10]) for i in range(0, len(packed), 10)] + [d.flush()]
print(sum(len(c) for c in chunks), d.eof)
c = zlib.compressobj(wbits=-15)
raw = c.compress(b"raw deflate ") + c.flush()
print(zlib.decompress(raw, wbits=-15))
try:
    gzip.decompress(b"not gzip")
except gzip.BadGzipFile as exc:
    print("BadGzipFile:", exc)
""",
    "struct and binary headers": """
import struct
header = struct.pack("<4sHHI", b"RIFF", 1, 2, 1024)
print(header, struct.calcsize("<4sHHI"), struct.unpack("<4sHHI", header))
records = struct.pack(">hh", 1, -2) + struct.pack(">hh", 300, 4)
print(list(struct.iter_unpack(">hh", records)))
s = struct.Struct("!If")
print(s.size, s.unpack(s.pack(7, 0.5)))
buf = bytearray(8)
struct.pack_into("<Q", buf, 0, 2 ** 40)
print(struct.unpack_from("<I", buf, 4), bytes(buf).hex())
""",
    # --- helpers ----------------------------------------------------------------------------
    "contextlib": """
import contextlib, io
events = []
@contextlib.contextmanager
def section(name):
    events.append("enter " + name)
    try:
        yield name.upper()
    except ValueError as exc:
        events.append("caught " + str(exc))
    finally:
        events.append("exit " + name)
with section("a") as label:
    print("inside", label)
with section("b"):
    raise ValueError("bad row")
with contextlib.suppress(KeyError, IndexError):
    [][1]
with contextlib.nullcontext(5) as five:
    print(five)
buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    print("captured line")
    print("and another")
print(events, repr(buf.getvalue()))
class Res:
    def close(self):
        events.append("closed")
with contextlib.closing(Res()):
    pass
print(events[-1])
class Timer(contextlib.ContextDecorator):
    def __enter__(self):
        events.append("start")
        return self
    def __exit__(self, *exc):
        events.append("stop")
        return False
@Timer()
def work():
    return 42
print(work(), events[-2:])
""",
    "shlex and fnmatch": """
import shlex, fnmatch
cmds = ["grep -r 'disk full' /var/log --include='*.log'", 'echo "a b" c\\\\ d']
for cmd in cmds:
    print(shlex.split(cmd))
print(shlex.join(["ls", "-l", "my file.txt"]), shlex.quote("it's"))
names = ["app.log", "app.log.1", "error.txt", "Data.CSV", "notes.md"]
print(fnmatch.filter(names, "*.log*"), [n for n in names if fnmatch.fnmatch(n.lower(), "*.csv")])
print(fnmatch.fnmatchcase("Data.CSV", "*.csv"), fnmatch.translate("*.py"))
""",
    "a pipeline: base64 gzip csv": """
import base64, csv, gzip, io, statistics
table = "region,sales\\nnorth,10\\nsouth,30\\nnorth,20\\n"
payload = base64.b64encode(gzip.compress(table.encode(), mtime=0))
reader = csv.DictReader(io.StringIO(gzip.decompress(base64.b64decode(payload)).decode()))
totals = {}
for row in reader:
    totals.setdefault(row["region"], []).append(float(row["sales"]))
print({k: (sum(v), statistics.mean(v)) for k, v in sorted(totals.items())})
""",
}
