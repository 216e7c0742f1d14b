"""Pure helpers of files: stored filenames, content types, Content-Disposition and Range parsing."""

import pytest

from cms.errors import BadRequest
from cms.services.content.file_parts import clean_content_type, safe_filename, served_inline
from cms.web.files import content_disposition, parse_range


@pytest.mark.parametrize("given, stored", [
    ("report.pdf", "report.pdf"),
    ("C:\\Users\\me\\report.pdf", "report.pdf"),
    ("../../etc/passwd", "passwd"),
    ("a\x00b\x1fc\x7f.txt", "abc.txt"),
    ("evil\u202etxt.exe", "eviltxt.exe"),
    ("  spaced  ", "spaced"),
    ("..", "file"),
    ("dir/", "file"),
    (None, "file"),
    ("e\u0301.txt", "\u00e9.txt"),
], ids=["plain", "windows-path", "posix-path", "controls", "bidi-override", "spaces", "dot-dot", "empty-last-part",
        "none", "nfc"])
def test_safe_filename(given, stored):
    assert safe_filename(given) == stored


def test_long_filenames_keep_their_extension():
    assert safe_filename("x" * 300 + ".jpeg") == "x" * 250 + ".jpeg"
    assert safe_filename("y" * 300) == "y" * 255


@pytest.mark.parametrize("given, stored", [
    (None, "application/octet-stream"),
    ("image/PNG", "image/png"),
    ("image/svg+xml", "image/svg+xml"),
    ("text/plain;charset=UTF-8", "text/plain; charset=utf-8"),
    ("text/plain; boundary=x", "text/plain"),
    ("html", "application/octet-stream"),
    ("text/html\r\nX: y", "application/octet-stream"),
    ("a/b/c", "application/octet-stream"),
], ids=["missing", "case", "svg", "charset", "other-parameter", "no-slash", "injection", "two-slashes"])
def test_clean_content_type(given, stored):
    assert clean_content_type(given) == stored


@pytest.mark.parametrize("content_type, inline", [
    ("image/png", True), ("text/plain; charset=utf-8", True), ("application/pdf", True),
    ("text/html", False), ("image/svg+xml", False), ("application/xhtml+xml", False), ("text/xml", False),
    ("application/octet-stream", False),
])
def test_only_passive_types_are_inline(content_type, inline):
    assert served_inline(content_type) is inline


@pytest.mark.parametrize("name, header", [
    ("a.png", "inline; filename=\"a.png\"; filename*=UTF-8''a.png"),
    ("résumé.pdf", "inline; filename=\"resume.pdf\"; filename*=UTF-8''r%C3%A9sum%C3%A9.pdf"),
    ("文件.pdf", "inline; filename=\"file.pdf\"; filename*=UTF-8''%E6%96%87%E4%BB%B6.pdf"),
    ('say "hi";.txt', "inline; filename=\"say _hi_;.txt\"; filename*=UTF-8''say%20%22hi%22%3B.txt"),
], ids=["ascii", "accents", "no-latin", "quotes"])
def test_content_disposition(name, header):
    assert content_disposition("inline", name) == header


@pytest.mark.parametrize("header, size, expected", [
    (None, 10, None),
    ("bytes=0-0", 10, (0, 1)),
    ("bytes=2-5", 10, (2, 6)),
    ("bytes=7-", 10, (7, 10)),
    ("bytes=-3", 10, (7, 10)),
    ("bytes=-30", 10, (0, 10)),
    ("bytes=5-30", 10, (5, 10)),
    ("BYTES = 1 - 2", 10, (1, 3)),
    ("bytes=0-1,4-5", 10, None),
    ("lines=0-1", 10, None),
], ids=["none", "first-byte", "middle", "open", "suffix", "long-suffix", "clamped", "spacing", "multi", "unit"])
def test_parse_range(header, size, expected):
    assert parse_range(header, size) == expected


@pytest.mark.parametrize("header, size", [
    ("bytes=10-", 10), ("bytes=-0", 10), ("bytes=0-", 0), ("bytes=-5", 0), ("bytes=3-2", 10), ("bytes=a-b", 10),
    ("bytes=-", 10), ("bytes=" + "9" * 30 + "-", 10),
], ids=["at-end", "empty-suffix", "empty-file", "suffix-of-empty", "backwards", "letters", "no-numbers", "huge"])
def test_bad_ranges_are_bad_requests(header, size):
    with pytest.raises(BadRequest):
        parse_range(header, size)
