"""The Kubernetes CEL libraries for IPs, CIDRs, URLs and named formats, as the DRA environment
loads them (``staging/src/k8s.io/apiserver/pkg/cel/library/`` ``ip.go``, ``cidr.go``,
``urls.go``, ``format.go``, Kubernetes v1.36.2), with the Go standard library parts they stand
on written out: ``net/netip``'s ``ParseAddr``/``ParsePrefix`` and address classes, ``net/url``'s
``Parse``/``ParseRequestURI`` (Go 1.27, which the recorded 1.36 binaries were built with), and
the apimachinery and kube-openapi validators behind the named formats. Pure: values in, values or
``CelLibraryError`` (cel-go's message, word for word) out. ``topodra.sim.cel`` binds them.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = [
    "CelLibraryError",
    "Prefix",
    "URL",
    "FORMATS",
    "cidr_contains_cidr",
    "cidr_contains_ip",
    "parse_cidr",
    "parse_ip",
    "parse_request_uri",
    "parse_url",
]

IPAddr = ipaddress.IPv4Address | ipaddress.IPv6Address


class CelLibraryError(ValueError):
    """A library function's error, in cel-go's words."""


def _quote(s: str) -> str:
    """strconv.Quote for the strings these messages quote (printable ASCII and escapes)."""
    out = ['"']
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


# --- net/netip ---------------------------------------------------------------------------------


class _AddrError(Exception):
    def __init__(self, raw: str, msg: str, at: str = "") -> None:
        text = f"ParseAddr({_quote(raw)}): {msg}" + (f" (at {_quote(at)})" if at else "")
        super().__init__(text)


def _ipv4_fields(raw: str, s: str) -> list[int]:
    """parseIPv4Fields."""
    fields: list[int] = []
    val = dig = 0
    for i, c in enumerate(s):
        if "0" <= c <= "9":
            if dig == 1 and val == 0:
                raise _AddrError(raw, "IPv4 field has octet with leading zero")
            val = val * 10 + ord(c) - 48
            dig += 1
            if val > 255:
                raise _AddrError(raw, "IPv4 field has value >255")
        elif c == ".":
            if i == 0 or i == len(s) - 1 or s[i - 1] == ".":
                raise _AddrError(raw, "IPv4 field must have at least one digit", s[i:])
            if len(fields) == 3:
                raise _AddrError(raw, "IPv4 address too long")
            fields.append(val)
            val = dig = 0
        else:
            raise _AddrError(raw, "unexpected character", s[i:])
    if len(fields) < 3:
        raise _AddrError(raw, "IPv4 address too short")
    return [*fields, val]


def _ipv6(raw: str) -> tuple[bytes, str]:
    """parseIPv6: the 16 bytes and the zone."""
    s, zone = raw, ""
    if "%" in s:
        s, zone = s[: s.index("%")], s[s.index("%") + 1 :]
        if not zone:
            raise _AddrError(raw, "zone must be a non-empty string")
    ip = bytearray(16)
    ellipsis = -1
    if s.startswith("::"):
        ellipsis, s = 0, s[2:]
        if not s:
            return bytes(ip), zone
    i = 0
    while i < 16:
        off, acc = 0, 0
        while off < len(s):
            c = s[off]
            if c.isascii() and c in "0123456789abcdefABCDEF":
                acc = (acc << 4) + int(c, 16)
            else:
                break
            if off > 3:
                raise _AddrError(raw, "each group must have 4 or less digits", s)
            if acc > 0xFFFF:
                raise _AddrError(raw, "IPv6 field has value >=2^16", s)
            off += 1
        if off == 0:
            raise _AddrError(raw, "each colon-separated field must have at least one digit", s)
        if off < len(s) and s[off] == ".":
            if ellipsis < 0 and i != 12:
                raise _AddrError(raw, "embedded IPv4 address must replace the final 2 fields of the address", s)
            if i + 4 > 16:
                raise _AddrError(raw, "too many hex fields to fit an embedded IPv4 at the end of the address", s)
            ip[i : i + 4] = bytes(_ipv4_fields(raw, s))
            s = ""
            i += 4
            break
        ip[i], ip[i + 1] = acc >> 8, acc & 0xFF
        i += 2
        s = s[off:]
        if not s:
            break
        if s[0] != ":":
            raise _AddrError(raw, "unexpected character, want colon", s)
        if len(s) == 1:
            raise _AddrError(raw, "colon must be followed by more characters", s)
        s = s[1:]
        if s[0] == ":":
            if ellipsis >= 0:
                raise _AddrError(raw, "multiple :: in address", s)
            ellipsis, s = i, s[1:]
            if not s:
                break
    if s:
        raise _AddrError(raw, "trailing garbage after address", s)
    if i < 16:
        if ellipsis < 0:
            raise _AddrError(raw, "address string too short")
        n = 16 - i
        ip[ellipsis + n : 16] = ip[ellipsis:i]
        ip[ellipsis : ellipsis + n] = bytes(n)
    elif ellipsis >= 0:
        raise _AddrError(raw, "the :: must expand to at least one field of zeros")
    return bytes(ip), zone


def parse_addr(raw: str) -> tuple[IPAddr, str]:
    """netip.ParseAddr: the address and its zone; ``_AddrError`` in netip's words."""
    for c in raw:
        if c == ".":
            return ipaddress.IPv4Address(bytes(_ipv4_fields(raw, raw))), ""
        if c == ":":
            b, zone = _ipv6(raw)
            return ipaddress.IPv6Address(b), zone
        if c == "%":
            raise _AddrError(raw, "missing IPv6 address")
    raise _AddrError(raw, "unable to parse IP")


def _is_4in6(a: IPAddr) -> bool:
    return isinstance(a, ipaddress.IPv6Address) and a.ipv4_mapped is not None


def parse_ip(raw: str) -> IPAddr:
    """ip.go ``parseIPAddr``: no zone, no IPv4-mapped IPv6."""
    try:
        addr, zone = parse_addr(raw)
    except _AddrError as e:
        raise CelLibraryError(f"IP Address {_quote(raw)} parse error during conversion from string: {e}") from None
    if zone:
        raise CelLibraryError(f"IP address {_quote(raw)} with zone value is not allowed")
    if _is_4in6(addr):
        raise CelLibraryError(f"IPv4-mapped IPv6 address {_quote(raw)} is not allowed")
    return addr


def ip_string(a: IPAddr) -> str:
    """Addr.String (RFC 5952 for IPv6, as Python's compressed form)."""
    return str(a)


def is_loopback(a: IPAddr) -> bool:
    return a.is_loopback if isinstance(a, ipaddress.IPv4Address) else int(a) == 1


def is_unspecified(a: IPAddr) -> bool:
    return int(a) == 0


def is_link_local_unicast(a: IPAddr) -> bool:
    if isinstance(a, ipaddress.IPv4Address):
        return a.packed[:2] == b"\xa9\xfe"  # 169.254.0.0/16
    return a.packed[0] == 0xFE and a.packed[1] & 0xC0 == 0x80  # fe80::/10


def is_link_local_multicast(a: IPAddr) -> bool:
    if isinstance(a, ipaddress.IPv4Address):
        return a.packed[:3] == b"\xe0\x00\x00"  # 224.0.0.0/24
    return a.packed[0] == 0xFF and a.packed[1] & 0x0F == 0x02  # ff02::/16


def is_global_unicast(a: IPAddr) -> bool:
    """Addr.IsGlobalUnicast: not unspecified, loopback, multicast, link-local unicast, or the
    IPv4 broadcast address."""
    if isinstance(a, ipaddress.IPv4Address) and int(a) == 0xFFFFFFFF:
        return False
    return not (is_unspecified(a) or is_loopback(a) or a.is_multicast or is_link_local_unicast(a))


@dataclass(frozen=True)
class Prefix:
    """A netip.Prefix: the address as written and the prefix length."""

    addr: IPAddr
    bits: int

    def masked(self) -> Prefix:
        net = ipaddress.ip_network(f"{self.addr}/{self.bits}", strict=False)
        return Prefix(net.network_address, self.bits)

    def contains(self, a: IPAddr) -> bool:
        if a.version != self.addr.version:
            return False
        return a in ipaddress.ip_network(f"{self.addr}/{self.bits}", strict=False)

    def __str__(self) -> str:
        return f"{self.addr}/{self.bits}"


def _parse_prefix(raw: str) -> Prefix:
    """netip.ParsePrefix, with its error messages."""
    i = raw.rfind("/")
    if i < 0:
        raise ValueError(f"netip.ParsePrefix({_quote(raw)}): no '/'")
    try:
        addr, zone = parse_addr(raw[:i])
    except _AddrError as e:
        raise ValueError(f"netip.ParsePrefix({_quote(raw)}): {e}") from None
    if zone:
        raise ValueError(f"netip.ParsePrefix({_quote(raw)}): IPv6 zones cannot be present in a prefix")
    bits_s = raw[i + 1 :]
    if len(bits_s) > 1 and (bits_s[0] < "1" or bits_s[0] > "9"):
        raise ValueError(f"netip.ParsePrefix({_quote(raw)}): bad bits after slash: {_quote(bits_s)}")
    if not bits_s or not bits_s.isascii() or not bits_s.isdigit() or len(bits_s) > 18:  # strconv.Atoi fails
        raise ValueError(f"netip.ParsePrefix({_quote(raw)}): bad bits after slash: {_quote(bits_s)}")
    bits = int(bits_s)
    max_bits = 32 if addr.version == 4 else 128
    if bits > max_bits:
        raise ValueError(f"netip.ParsePrefix({_quote(raw)}): prefix length out of range")
    return Prefix(addr, bits)


def parse_cidr(raw: str) -> Prefix:
    """cidr.go ``stringToCIDR`` (``parseCIDR``; its message wraps twice, as there)."""
    try:
        prefix = _parse_prefix(raw)
    except ValueError as e:
        inner = f"network address parse error during conversion from string: {e}"
        raise CelLibraryError(f"network address parse error during conversion from string: {inner}") from None
    if _is_4in6(prefix.addr):
        raise CelLibraryError(f"network address parse error during conversion from string: IPv4-mapped IPv6 address {_quote(raw)} is not allowed")
    return prefix


def cidr_contains_ip(p: Prefix, a: IPAddr) -> bool:
    return p.contains(a)


def cidr_contains_cidr(p: Prefix, o: Prefix) -> bool:
    """Overlaps and no longer a prefix than the other."""
    if p.addr.version != o.addr.version:
        return False
    a = ipaddress.ip_network(f"{p.addr}/{p.bits}", strict=False)
    b = ipaddress.ip_network(f"{o.addr}/{o.bits}", strict=False)
    return a.overlaps(b) and p.bits <= o.bits


# --- net/url -----------------------------------------------------------------------------------

_HOST, _ZONE, _PATH, _USER, _QUERY, _FRAGMENT = "host", "zone", "path", "user", "query", "fragment"


def _should_escape(c: int, mode: str) -> bool:
    """gen_encoding_table.go's shouldEscape (the table the url package is generated from)."""
    ch = chr(c)
    if ch.isascii() and ch.isalnum():
        return False
    if mode in (_HOST, _ZONE) and ch in "!$&'()*+,;=:[]<>\"":
        return False
    if ch in "-_.~":
        return False
    if ch in "$&+,/:;=?@":
        if mode == _PATH:
            return ch == "?"
        if mode == _USER:
            return ch in "@/?:"
        if mode == _QUERY:
            return True
        if mode == _FRAGMENT:
            return False
    return not (mode == _FRAGMENT and ch in "!()*")


def _ishex(c: int) -> bool:
    return chr(c) in "0123456789abcdefABCDEF"


def _unescape(s: bytes, mode: str) -> bytes:
    """url.unescape."""
    n, has_plus, i = 0, False, 0
    while i < len(s):
        c = s[i]
        if c == 0x25:  # %
            n += 1
            if i + 2 >= len(s) or not _ishex(s[i + 1]) or not _ishex(s[i + 2]):
                bad = s[i : i + 3]
                raise ValueError(f"invalid URL escape {_quote(bad.decode('utf-8', 'replace'))}")
            if mode == _HOST and int(chr(s[i + 1]), 16) < 8 and s[i : i + 3] != b"%25":
                raise ValueError(f"invalid URL escape {_quote(s[i : i + 3].decode())}")
            if mode == _ZONE:
                v = int(s[i + 1 : i + 3], 16)
                if s[i : i + 3] != b"%25" and v != 0x20 and _should_escape(v, _HOST):
                    raise ValueError(f"invalid URL escape {_quote(s[i : i + 3].decode())}")
            i += 3
        elif c == 0x2B:  # +
            has_plus = mode == _QUERY
            i += 1
        else:
            if mode in (_HOST, _ZONE) and c < 0x80 and _should_escape(c, mode):
                raise ValueError(f"invalid character {_quote(chr(c))} in host name")
            i += 1
    if n == 0 and not has_plus:
        return s
    out = bytearray()
    i = 0
    while i < len(s):
        c = s[i]
        if c == 0x25:
            out.append(int(s[i + 1 : i + 3], 16))
            i += 3
            continue
        out.append(0x20 if c == 0x2B and mode == _QUERY else c)
        i += 1
    return bytes(out)


def _escape(s: bytes, mode: str) -> bytes:
    out = bytearray()
    for c in s:
        if c == 0x20 and mode == _QUERY:
            out.append(0x2B)
        elif _should_escape(c, mode):
            out.extend(f"%{c:02X}".encode())
        else:
            out.append(c)
    return bytes(out)


def _valid_encoded(s: bytes, mode: str) -> bool:
    return all(chr(c) in "!$&'()*+,;=:@[]%" or not _should_escape(c, mode) for c in s)


def _valid_optional_port(port: bytes) -> bool:
    return not port or (port[:1] == b":" and all(0x30 <= c <= 0x39 for c in port[1:]))


@dataclass
class URL:
    """A net/url URL: the parts the CEL library reads."""

    scheme: str = ""
    opaque: str = ""
    host: bytes = b""
    path: bytes = b""
    raw_path: bytes = b""
    raw_query: str = ""
    user: str | None = None
    fragment: bytes = field(default=b"")

    def hostname(self) -> str:
        return _split_host_port(self.host)[0].decode("utf-8", "replace")

    def port(self) -> str:
        return _split_host_port(self.host)[1].decode("utf-8", "replace")

    def escaped_path(self) -> str:
        """URL.EscapedPath."""
        if self.raw_path and _valid_encoded(self.raw_path, _PATH):
            try:
                if _unescape(self.raw_path, _PATH) == self.path:
                    return self.raw_path.decode("utf-8", "replace")
            except ValueError:
                pass
        if self.path == b"*":
            return "*"
        return _escape(self.path, _PATH).decode("utf-8", "replace")

    def query(self) -> dict[str, list[str]]:
        """URL.Query (ParseQuery, errors dropped)."""
        out: dict[str, list[str]] = {}
        for part in self.raw_query.encode().split(b"&") if self.raw_query else ():
            if b";" in part or not part:
                continue
            key, _, value = part.partition(b"=")
            try:
                k, v = _unescape(key, _QUERY), _unescape(value, _QUERY)
            except ValueError:
                continue
            out.setdefault(k.decode("utf-8", "replace"), []).append(v.decode("utf-8", "replace"))
        return out


def _split_host_port(host: bytes) -> tuple[bytes, bytes]:
    port = b""
    colon = host.rfind(b":")
    if colon != -1 and _valid_optional_port(host[colon:]):
        host, port = host[:colon], host[colon + 1 :]
    if host.startswith(b"[") and host.endswith(b"]"):
        host = host[1:-1]
    return host, port


def _scheme(raw: bytes) -> tuple[bytes, bytes]:
    """getScheme."""
    for i, c in enumerate(raw):
        ch = chr(c)
        if ch.isascii() and ch.isalpha():
            continue
        if ch.isascii() and (ch.isdigit() or ch in "+-."):
            if i == 0:
                return b"", raw
            continue
        if ch == ":":
            if i == 0:
                raise ValueError("missing protocol scheme")
            return raw[:i], raw[i + 1 :]
        return b"", raw
    return b"", raw


def _parse_host(scheme: str, host: bytes) -> bytes:
    """parseHost (Go 1.27: strict colons for http and https)."""
    open_bracket = host.rfind(b"[")
    if open_bracket > 0:
        raise ValueError("invalid IP-literal")
    if open_bracket == 0:
        close = host.rfind(b"]")
        if close < 0:
            raise ValueError("missing ']' in host")
        colon_port = host[close + 1 :]
        if not _valid_optional_port(colon_port):
            raise ValueError(f"invalid port {_quote(colon_port.decode('utf-8', 'replace'))} after host")
        unescaped_port = _unescape(colon_port, _HOST)
        hostname = host[1:close]
        zi = hostname.find(b"%25")
        if zi >= 0:
            name = _unescape(hostname[:zi], _HOST) + _unescape(hostname[zi:], _ZONE)
        else:
            name = _unescape(hostname, _HOST)
        try:
            addr, _ = parse_addr(name.decode("utf-8", "replace"))
        except _AddrError as e:
            raise ValueError(f"invalid host: {e}") from None
        if addr.version == 4:
            raise ValueError("invalid IP-literal")
        return b"[" + name + b"]" + unescaped_port
    i = host.find(b":")
    if i != -1:
        last = host.rfind(b":")
        if last != i and scheme not in ("http", "https"):
            i = last
        colon_port = host[i:]
        if not _valid_optional_port(colon_port):
            raise ValueError(f"invalid port {_quote(colon_port.decode('utf-8', 'replace'))} after host")
    return _unescape(host, _HOST)


def _valid_userinfo(s: bytes) -> bool:
    return all((chr(c).isascii() and chr(c).isalnum()) or chr(c) in "-._:~!$&'()*+,;=%@" for c in s)


def _parse(raw: bytes, via_request: bool) -> URL:
    """url.parse."""
    if any(c < 0x20 or c == 0x7F for c in raw):
        raise ValueError("net/url: invalid control character in URL")
    if not raw and via_request:
        raise ValueError("empty url")
    u = URL()
    if raw == b"*":
        u.path = b"*"
        return u
    scheme, rest = _scheme(raw)
    u.scheme = scheme.decode().lower()
    if rest.endswith(b"?") and rest.count(b"?") == 1:
        rest = rest[:-1]
    else:
        rest, _, query = rest.partition(b"?")
        u.raw_query = query.decode("utf-8", "replace")
    if not rest.startswith(b"/"):
        if u.scheme:
            u.opaque = rest.decode("utf-8", "replace")
            return u
        if via_request:
            raise ValueError("invalid URI for request")
        if b":" in rest.partition(b"/")[0]:
            raise ValueError("first path segment in URL cannot contain colon")
    if (u.scheme or (not via_request and not rest.startswith(b"///"))) and rest.startswith(b"//"):
        authority, rest = rest[2:], b""
        slash = authority.find(b"/")
        if slash >= 0:
            authority, rest = authority[:slash], authority[slash:]
        at = authority.rfind(b"@")
        u.host = _parse_host(u.scheme, authority[at + 1 :] if at >= 0 else authority)
        if at >= 0:
            if not _valid_userinfo(authority[:at]):
                raise ValueError("net/url: invalid userinfo")
            u.user = authority[:at].decode("utf-8", "replace")
    path = _unescape(rest, _PATH)
    u.path = path
    u.raw_path = b"" if _escape(path, _PATH) == rest else rest
    return u


def _url_error(raw: str, err: ValueError) -> CelLibraryError:
    return CelLibraryError(f"parse {_quote(raw)}: {err}")


def parse_request_uri(raw: str) -> URL:
    """url.ParseRequestURI; ``CelLibraryError`` with url.Error's text."""
    try:
        return _parse(raw.encode(), True)
    except ValueError as e:
        raise _url_error(raw, e) from None


def parse_url(raw: str) -> URL:
    """urls.go ``stringToUrl``: ParseRequestURI to check, then Parse (which cuts the fragment)."""
    try:
        parse_request_uri(raw)
    except CelLibraryError as e:
        raise CelLibraryError(f"URL parse error during conversion from string: {e}") from None
    head, _, frag = raw.partition("#")
    try:
        u = _parse(head.encode(), False)
        u.fragment = _unescape(frag.encode(), _FRAGMENT)
    except ValueError as e:
        raise CelLibraryError(f"URL parse error during conversion from string: {_url_error(head, e)}") from None
    return u


# --- named formats ---------------------------------------------------------------------------


def _regex_error_go(msg: str, fmt: str, *examples: str) -> str:
    """validation.RegexError, word for word."""
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    out = msg + " (e.g. "
    for i, e in enumerate(examples):
        if i > 0:
            out += " or "
        out += f"'{e}', "
    return out + f"regex used for validation is '{fmt}')"


_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = _LABEL + "(\\." + _LABEL + ")*"
_DNS1035 = "[a-z]([-a-z0-9]*[a-z0-9])?"
_KEY = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_VALUE = "(" + _KEY + ")?"
_LABEL_MSG = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character"
_SUBDOMAIN_MSG = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
_DNS1035_MSG = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character"
_KEY_MSG = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
_VALUE_MSG = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"


def _full(pattern: str, s: str) -> bool:
    """Go's ``regexp.MustCompile("^" + fmt + "$").MatchString`` ($: the end of the text only)."""
    return re.fullmatch(pattern, s) is not None


def _max_len(n: int) -> str:
    return f"must be no more than {n} characters"


def is_dns1123_label(s: str) -> list[str]:
    errs = [_max_len(63)] if len(s.encode()) > 63 else []
    if not _full(_LABEL, s):
        errs.append("must not contain dots" if _full(_SUBDOMAIN, s) else _regex_error_go(_LABEL_MSG, _LABEL, "my-name", "123-abc"))
    return errs


def is_dns1123_subdomain(s: str) -> list[str]:
    errs = [_max_len(253)] if len(s.encode()) > 253 else []
    if not _full(_SUBDOMAIN, s):
        errs.append(_regex_error_go(_SUBDOMAIN_MSG, _SUBDOMAIN, "example.com"))
    return errs


def is_dns1035_label(s: str) -> list[str]:
    errs = [_max_len(63)] if len(s.encode()) > 63 else []
    if not _full(_DNS1035, s):
        errs.append(_regex_error_go(_DNS1035_MSG, _DNS1035, "my-name", "abc-123"))
    return errs


def is_qualified_name(s: str) -> list[str]:
    """content.IsLabelKey."""
    errs: list[str] = []
    parts = s.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs.extend("prefix part " + m for m in is_dns1123_subdomain(prefix))
    else:
        return [
            "a valid label key " + _regex_error_go(_KEY_MSG, _KEY, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name.encode()) > 63:
        errs.append("name part " + _max_len(63))
    if not _full(_KEY, name):
        errs.append("name part " + _regex_error_go(_KEY_MSG, _KEY, "MyName", "my.name", "123-abc"))
    return errs


def is_label_value(s: str) -> list[str]:
    errs = [_max_len(63)] if len(s.encode()) > 63 else []
    if not _full(_VALUE, s):
        errs.append(_regex_error_go(_VALUE_MSG, _VALUE, "MyValue", "my_value", "12345"))
    return errs


def _mask_trailing_dash(name: str) -> str:
    """maskTrailingDash (apimachinery's generic name validation for prefixes)."""
    return name[:-2] + "a" if len(name) > 1 and name.endswith("-") else name


def _uri(s: str) -> list[str]:
    try:
        parse_request_uri(s)
    except CelLibraryError as e:
        return [str(e)]
    return []


_UUID = r"(?i)[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}"
_BASE64 = r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{4})"
_TIME = r"([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))"


def _is_date(s: str) -> bool:
    """time.Parse("2006-01-02", s) succeeds."""
    m = re.fullmatch(r"([0-9]{4})-([0-9]{2})-([0-9]{2})", s)
    if not m:
        return False
    year, month, day = (int(g) for g in m.groups())
    if not 1 <= month <= 12 or day < 1:
        return False
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    return day <= (31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)[month - 1]


def _is_datetime(s: str) -> bool:
    """strfmt.IsDateTime."""
    if len(s) < 4:
        return False
    parts = s.lower().split("t")
    if len(parts) < 2 or not _is_date(parts[0]):
        return False
    m = re.fullmatch(_TIME, parts[1])  # "." is any character but a newline, as in Go
    if m is None:
        return False
    return m.group(1) <= "23" and m.group(2) <= "59" and m.group(3) <= "59"


def _flag(ok: Callable[[str], bool], message: str) -> Callable[[str], list[str]]:
    return lambda s: [] if ok(s) else [message]


#: format.go ``ConstantFormats``: name -> (the format's Name, its validation)
FORMATS: dict[str, tuple[str, Callable[[str], list[str]]]] = {
    "dns1123Label": ("DNS1123Label", is_dns1123_label),
    "dns1123Subdomain": ("DNS1123Subdomain", is_dns1123_subdomain),
    "dns1035Label": ("DNS1035Label", is_dns1035_label),
    "qualifiedName": ("QualifiedName", is_qualified_name),
    "dns1123LabelPrefix": ("DNS1123LabelPrefix", lambda s: is_dns1123_label(_mask_trailing_dash(s))),
    "dns1123SubdomainPrefix": ("DNS1123SubdomainPrefix", lambda s: is_dns1123_subdomain(_mask_trailing_dash(s))),
    "dns1035LabelPrefix": ("DNS1035LabelPrefix", lambda s: is_dns1035_label(_mask_trailing_dash(s))),
    "labelValue": ("LabelValue", is_label_value),
    "uri": ("URI", _uri),
    "uuid": ("uuid", _flag(lambda s: re.fullmatch(_UUID, s) is not None, "does not match the UUID format")),
    "byte": ("byte", _flag(lambda s: re.fullmatch(_BASE64, s) is not None, "invalid base64")),
    "date": ("date", _flag(_is_date, "invalid date")),
    "datetime": ("datetime", _flag(_is_datetime, "invalid datetime")),
}
