"""The ip, cidr, url and format CEL libraries (``celnet``) as ``topodra.sim.cel`` loads them:
the checker's declarations (cel-go's overloads and types: ``net.IP`` and ``net.CIDR`` opaque,
``kubernetes.URL`` and ``kubernetes.NamedFormat`` objects, optionals where cel-go returns them)
and the runtime's implementations.

The C++ runtime carries a library value as a protobuf message: an IP or CIDR as its text
(``NET_TYPES_PROTO``; the checker declares them as messages too, as the C++ checker has no
opaque types of its own: they read ``net.IP`` and ``net.CIDR`` as in cel-go), a URL as the
string it was made from, a named format by name (``cel.CEL_TYPES_PROTO``). It cannot return a CEL optional from an extension function, so ``validate``
and ``format.named`` return an ``Optional*`` message, and ``hasValue``, ``value``, ``orValue``
and ``or`` are given overloads for those messages: the checked program is the same, only the
runtime's value differs (tests/sim/test_cel_go.py checks results against cel-go).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from topodra.sim import celnet

__all__ = ["NET_TYPES_PROTO", "NetLibrary"]

#: ``topodra/sim/cel_net.proto`` serialised (proto3, package ``net``, so that the types read as
#: cel-go names its opaque ``net.IP`` and ``net.CIDR``): ``IP {string text = 1}`` and ``CIDR
#: {string text = 1}``. A test rebuilds it with ``descriptor_pb2`` and compares.
NET_TYPES_PROTO = (
    b'\n\x19topodra/sim/cel_net.proto\x12\x03net"\x12\n\x02IP\x12\x0c\n\x04text\x18\x01 \x01(\t"\x14\n\x04'
    b'CIDR\x12\x0c\n\x04text\x18\x01 \x01(\tb\x06proto3'
)


def _never(*args: Any) -> Any:
    raise AssertionError("declaration-only overload called")


@lru_cache(maxsize=1024)
def _url(raw: str) -> celnet.URL:
    return celnet.parse_url(raw)


@lru_cache(maxsize=1024)
def _cidr(text: str) -> celnet.Prefix:
    return celnet.parse_cidr(text)


def _ip(text: str) -> celnet.IPAddr:
    return ipaddress.ip_address(text)


def _library_error(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The runtime reports a ValueError's text as the evaluation's error."""

    def call(*args: Any) -> Any:
        try:
            return fn(*args)
        except celnet.CelLibraryError as e:
            raise ValueError(str(e)) from None

    return call


class NetLibrary:
    """Declarations and implementations of the four libraries, given cel-expr-python and the
    message classes (``pool``: a descriptor pool holding both protos)."""

    def __init__(self, cel: Any, pool: Any) -> None:
        from google.protobuf import message_factory

        self.cel = cel
        cls = {n: message_factory.GetMessageClass(pool.FindMessageTypeByName(n)) for n in (
            "net.IP", "net.CIDR", "kubernetes.OptionalStrings", "kubernetes.OptionalFormat", "kubernetes.URL", "kubernetes.NamedFormat")}
        self.IP: Any = cls["net.IP"]
        self.CIDR: Any = cls["net.CIDR"]
        self.OptStrings: Any = cls["kubernetes.OptionalStrings"]
        self.OptFormat: Any = cls["kubernetes.OptionalFormat"]
        self.URL: Any = cls["kubernetes.URL"]
        self.Format: Any = cls["kubernetes.NamedFormat"]

    def _fn(self, name: str, *overloads: tuple[str, Any, list[Any], bool, Callable[..., Any]]) -> Any:
        cel = self.cel
        return cel.FunctionDecl(name, [cel.Overload(o, r, p, is_member=m, impl=f) for o, r, p, m, f in overloads])

    # ---- the checker
    def declared(self) -> list[Any]:
        """cel-go's declarations (library/ip.go, cidr.go, urls.go, format.go)."""
        T = self.cel.Type
        IP, CIDR = T("net.IP"), T("net.CIDR")
        URL, FMT = T("kubernetes.URL"), T("kubernetes.NamedFormat")
        S, B, INT = T.STRING, T.BOOL, T.INT
        fn, n = self._fn, _never
        out = [
            fn("ip", ("string_to_ip", IP, [S], False, n), ("cidr_ip", IP, [CIDR], True, n)),
            fn("family", ("ip_family", INT, [IP], True, n)),
            fn("ip.isCanonical", ("ip_is_canonical", B, [S], False, n)),
            fn("isIP", ("is_ip", B, [S], False, n)),
            fn("string", ("ip_to_string", S, [IP], False, n), ("cidr_to_string", S, [CIDR], False, n)),
            fn("cidr", ("string_to_cidr", CIDR, [S], False, n)),
            fn("containsIP", ("cidr_contains_ip_string", B, [CIDR, S], True, n), ("cidr_contains_ip_ip", B, [CIDR, IP], True, n)),
            fn("containsCIDR", ("cidr_contains_cidr_string", B, [CIDR, S], True, n), ("cidr_contains_cidr", B, [CIDR, CIDR], True, n)),
            fn("prefixLength", ("cidr_prefix_length", INT, [CIDR], True, n)),
            fn("masked", ("cidr_masked", CIDR, [CIDR], True, n)),
            fn("isCIDR", ("is_cidr", B, [S], False, n)),
            fn("url", ("string_to_url", URL, [S], False, n)),
            fn("getQuery", ("url_get_query", T.Map(S, T.List(S)), [URL], True, n)),
            fn("isURL", ("is_url_string", B, [S], False, n)),
            fn("format.named", ("format-named", T.AbstractType("optional_type", [FMT]), [S], False, n)),
            fn("validate", ("format-validate", T.AbstractType("optional_type", [T.List(S)]), [FMT, S], True, n)),
        ]
        for name in ("isUnspecified", "isLoopback", "isLinkLocalMulticast", "isLinkLocalUnicast", "isGlobalUnicast"):
            out.append(fn(name, (f"ip_{_snake(name)}", B, [IP], True, n)))
        for name in ("getScheme", "getHost", "getHostname", "getPort", "getEscapedPath"):
            out.append(fn(name, (f"url_{_snake(name)}", S, [URL], True, n)))
        for name in celnet.FORMATS:
            out.append(fn(f"format.{name}", (f"format.{name}", FMT, [], False, n)))
        return out

    # ---- the runtime
    def runtime(self) -> list[Any]:
        T = self.cel.Type
        D, S, B, INT = T.DYN, T.STRING, T.BOOL, T.INT
        fn, e = self._fn, _library_error
        out = [
            fn("ip", ("k8s_string_to_ip", D, [S], False, e(lambda s: self._ip_msg(celnet.parse_ip(s)))),
               ("k8s_cidr_ip", D, [D], True, lambda c: self._ip_msg(_cidr(c.text).addr))),
            fn("family", ("k8s_ip_family", INT, [D], True, lambda a: _ip(a.text).version)),
            fn("ip.isCanonical", ("k8s_ip_is_canonical", B, [S], False, e(lambda s: str(celnet.parse_ip(s)) == s))),
            fn("isIP", ("k8s_is_ip", B, [S], False, lambda s: _valid(celnet.parse_ip, s))),
            # one overload per arity for messages: the runtime dispatches on kinds, and every message
            # is of one kind to it (the checked program has already picked the right overload)
            fn("string", ("k8s_net_to_string", S, [T("net.IP")], False, self._to_string)),
            fn("cidr", ("k8s_string_to_cidr", D, [S], False, e(lambda s: self._cidr_msg(_cidr(s))))),
            fn("containsIP", ("k8s_contains_ip", B, [D, D], True, e(self._contains_ip))),
            fn("containsCIDR", ("k8s_contains_cidr", B, [D, D], True, e(self._contains_cidr))),
            fn("prefixLength", ("k8s_prefix_length", INT, [D], True, lambda c: _cidr(c.text).bits)),
            fn("masked", ("k8s_masked", D, [D], True, lambda c: self._cidr_msg(_cidr(c.text).masked()))),
            fn("isCIDR", ("k8s_is_cidr", B, [S], False, lambda s: _valid(_cidr, s))),
            fn("url", ("k8s_string_to_url", D, [S], False, e(self._url_msg))),
            fn("getQuery", ("k8s_url_get_query", D, [D], True, lambda u: _url(u.raw).query())),
            fn("isURL", ("k8s_is_url", B, [S], False, lambda s: _valid(celnet.parse_request_uri, s))),
            fn("format.named", ("k8s_format_named", D, [S], False, lambda s: self.OptFormat(present=s in celnet.FORMATS, name=s))),
            fn("validate", ("k8s_format_validate", D, [D, S], True, self._validate)),
            *self._optionals(),
        ]
        for name, test in (("isUnspecified", celnet.is_unspecified), ("isLoopback", celnet.is_loopback), ("isLinkLocalMulticast", celnet.is_link_local_multicast),
                           ("isLinkLocalUnicast", celnet.is_link_local_unicast), ("isGlobalUnicast", celnet.is_global_unicast)):
            out.append(fn(name, (f"k8s_ip_{_snake(name)}", B, [D], True, lambda a, t=test: t(_ip(a.text)))))
        for name, get in (("getScheme", _scheme), ("getHost", _host), ("getHostname", celnet.URL.hostname),
                          ("getPort", celnet.URL.port), ("getEscapedPath", celnet.URL.escaped_path)):
            out.append(fn(name, (f"k8s_url_{_snake(name)}", S, [D], True, lambda u, g=get: g(_url(u.raw)))))
        for name in celnet.FORMATS:
            out.append(fn(f"format.{name}", (f"k8s_format_{name}", D, [], False, lambda n=name: self.Format(name=n))))
        return out

    def _ip_msg(self, a: celnet.IPAddr) -> Any:
        return self.IP(text=str(a))

    def _cidr_msg(self, p: celnet.Prefix) -> Any:
        return self.CIDR(text=str(p))

    def _url_msg(self, s: str) -> Any:
        _url(s)  # parse errors now
        return self.URL(raw=s)

    def _optionals(self) -> list[Any]:
        """hasValue, value, orValue and or for the runtime's optional stand-ins (a message
        receiver: a dyn one would collide with the optional extension's own)."""
        T = self.cel.Type
        D, B = T.DYN, T.BOOL
        opt = T("kubernetes.OptionalStrings")  # any message: see ``string`` above
        return [
            self._fn("hasValue", ("k8s_opt_has_value", B, [opt], True, lambda o: o.present)),
            self._fn("value", ("k8s_opt_value", D, [opt], True, self._value)),
            self._fn("orValue", ("k8s_opt_or_value", D, [opt, D], True, lambda o, d: self._value(o) if o.present else d)),
            self._fn("or", ("k8s_opt_or", D, [opt, D], True, lambda o, other: o if o.present else other)),
        ]

    def _to_string(self, v: Any) -> str:
        if isinstance(v, self.IP | self.CIDR):
            return str(v.text)
        from topodra.sim.cel import no_such_overload  # cel imports this module

        raise no_such_overload("string", v)

    def _contains_ip(self, c: Any, other: Any) -> bool:
        """cidr_contains_ip_string parses the string and hands the result on: a parse error is
        then not an IP, and cidrContainsIP answers "no such overload" (for the CIDR, which is no
        error) rather than the parse error."""
        if isinstance(other, str):
            try:
                addr = celnet.parse_ip(other)
            except celnet.CelLibraryError:
                raise ValueError("no such overload") from None
        else:
            addr = _ip(other.text)
        return celnet.cidr_contains_ip(_cidr(c.text), addr)

    def _contains_cidr(self, c: Any, other: Any) -> bool:
        o = _cidr(other) if isinstance(other, str) else _cidr(other.text)
        return celnet.cidr_contains_cidr(_cidr(c.text), o)

    def _validate(self, f: Any, s: str) -> Any:
        errors = celnet.FORMATS[f.name][1](s)
        return self.OptStrings(present=bool(errors), values=errors)

    def _value(self, o: Any) -> Any:
        if not o.present:
            raise ValueError("optional.none() dereference")
        if isinstance(o, self.OptFormat):
            return self.Format(name=o.name)
        return list(o.values)


def _valid(parse: Callable[[str], Any], s: str) -> bool:
    try:
        parse(s)
    except celnet.CelLibraryError:
        return False
    return True


def _scheme(u: celnet.URL) -> str:
    return u.scheme


def _host(u: celnet.URL) -> str:
    return u.host.decode("utf-8", "replace")


def _snake(name: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in name)
