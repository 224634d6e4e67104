"""Exceptions of the NRI layer, from wire framing up to plugin registration."""

from __future__ import annotations

__all__ = [
    "ConnectionClosed",
    "ConversionError",
    "EmptyCPUSetError",
    "NRIError",
    "OversizedMessageError",
    "ProtocolError",
    "RegistrationError",
    "RpcError",
    "UpdateInHandlerError",
]


class NRIError(Exception):
    """Base class of every error raised by ``topodra.nri``."""


class ProtocolError(NRIError):
    """The peer broke the wire protocol; the connection cannot continue."""


class OversizedMessageError(NRIError):
    """A ttrpc message body above the 4 MiB limit, refused before sending."""

    def __init__(self, length: int, limit: int) -> None:
        super().__init__(f"message length {length} exceed maximum message size of {limit}")
        self.length = length
        self.limit = limit


class RpcError(NRIError):
    """A call answered with a non-OK ttrpc status."""

    def __init__(self, code: int, message: str, *, method: str = "") -> None:
        where = f"{method}: " if method else ""
        super().__init__(f"{where}rpc error: code = {_code_name(code)} desc = {message}")
        self.code = code
        self.message = message
        self.method = method


class ConnectionClosed(NRIError):
    """The connection ended while a call was waiting for its answer."""


class RegistrationError(NRIError):
    """The runtime refused the plugin (bad name or index) or never answered."""


class ConversionError(NRIError, ValueError):
    """A message field that cannot be converted; the text names the field and value."""


class EmptyCPUSetError(ConversionError):
    """An empty cpuset/memset: the runtime reads "" as "no change", so it is refused."""


class UpdateInHandlerError(NRIError):
    """An event handler awaited its own unsolicited update, which can only go out after its reply."""


def _code_name(code: int) -> str:
    from topodra.nri.ttrpc import code_name

    return code_name(code)
