"""The Kubernetes client the agent uses: async, plain dicts in and out, one error type.

Built on lightkube's AsyncClient (chosen over the official client for this
job: a third of the import time and RSS and about four times faster
create/list against the same server; figures in docs/dra.md and
``python -m benchmarks dra``). Objects are handled as generic resources, so
fields this client version does not model (new DRA fields) pass through
untouched instead of being dropped by a typed model.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import httpx2
from lightkube import AsyncClient, KubeConfig
from lightkube.core import resource as lk_resource
from lightkube.core.exceptions import ApiError as LightkubeApiError
from lightkube.core.selector import build_selector
from lightkube.generic_resource import (
    GenericGlobalResource,
    GenericGlobalStatus,
    GenericNamespacedResource,
    GenericNamespacedStatus,
    create_api_info,
)

from topodra.kube.errors import ApiError, FieldError
from topodra.kube.wire import Lean, lean_for

__all__ = [
    "DEVICE_CLASSES",
    "NAMESPACES",
    "NODES",
    "PODS",
    "RESOURCE_CLAIMS",
    "RESOURCE_CLAIM_TEMPLATES",
    "RESOURCE_SLICES",
    "KubeClient",
    "Resource",
]


@dataclass(frozen=True, slots=True)
class Resource:
    """A REST resource: group/version/kind/plural and scope."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    has_status: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


NODES: Final = Resource("", "v1", "Node", "nodes", False, True)
NAMESPACES: Final = Resource("", "v1", "Namespace", "namespaces", False, True)
PODS: Final = Resource("", "v1", "Pod", "pods", True, True)
RESOURCE_SLICES: Final = Resource("resource.k8s.io", "v1", "ResourceSlice", "resourceslices", False)
DEVICE_CLASSES: Final = Resource("resource.k8s.io", "v1", "DeviceClass", "deviceclasses", False)
RESOURCE_CLAIMS: Final = Resource("resource.k8s.io", "v1", "ResourceClaim", "resourceclaims", True, True)
RESOURCE_CLAIM_TEMPLATES: Final = Resource(
    "resource.k8s.io", "v1", "ResourceClaimTemplate", "resourceclaimtemplates", True
)

_classes: dict[Resource, Any] = {}
_JSON_BODY: Final = {"Content-Type": "application/json"}


def _lk(resource: Resource) -> Any:
    """An unregistered lightkube generic class for ``resource`` (dict-preserving)."""
    cls = _classes.get(resource)
    if cls is not None:
        return cls
    info = create_api_info(resource.group, resource.version, resource.kind, resource.plural)
    base = GenericNamespacedResource if resource.namespaced else GenericGlobalResource
    status_base = GenericNamespacedStatus if resource.namespaced else GenericGlobalStatus
    status_info = lk_resource.ApiInfo(
        resource=info.resource, parent=info.resource, plural=info.plural, verbs=["get", "patch", "put"], action="status"
    )
    status = type(f"{resource.kind}Status", (status_base,), {"_api_info": status_info})
    cls = type(resource.kind, (base,), {"_api_info": info, "Status": status})
    _classes[resource] = cls
    return cls


def _plain(obj: Any) -> dict[str, Any]:
    if isinstance(obj, dict):
        out = dict(obj)
        meta = out.get("metadata")
        if meta is not None and not isinstance(meta, dict):
            out["metadata"] = meta.to_dict()
        return out
    return dict(obj.to_dict())


def _translate(exc: Exception) -> ApiError:
    if isinstance(exc, LightkubeApiError):
        status = exc.status
        details = getattr(status, "details", None)
        return ApiError(
            int(status.code or 500),
            str(status.reason or ""),
            str(status.message or ""),
            kind=str(getattr(details, "kind", "") or ""),
            name=str(getattr(details, "name", "") or ""),
            group=str(getattr(details, "group", "") or ""),
            causes=[
                FieldError(str(c.field or ""), str(c.message or ""), str(c.reason or ""))
                for c in (getattr(details, "causes", None) or [])
            ],
        )
    if isinstance(exc, httpx2.HTTPStatusError):
        code = exc.response.status_code
        try:
            text = exc.response.text[:500]
        except httpx2.ResponseNotRead:  # a streaming (watch) response
            text = ""
        reason = {404: "NotFound", 409: "Conflict", 410: "Expired", 422: "Invalid"}.get(code, "Unknown")
        return ApiError(code, reason, text or f"HTTP {code} from the API server")
    return ApiError(503, "ServiceUnavailable", f"cannot reach the API server: {exc}")


class KubeClient:
    """Async Kubernetes access for topodra; every failure is a ``topodra.kube.errors.ApiError``."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client
        self._urls: dict[str, httpx2.URL] = {}
        self._lean: Lean | bool | None = False  # False: not looked at yet; None: httpx only

    @classmethod
    def for_url(
        cls,
        url: str,
        *,
        token: str = "topodra",
        token_file: str | os.PathLike[str] | None = None,
        ca_file: str | os.PathLike[str] | None = None,
        namespace: str = "default",
        timeout: float = 10.0,
    ) -> KubeClient:
        """A client for an API server URL (the agent's ``kube.server``, the playground's API server
        double): ``token``, or ``token_file``'s (read again on a 401, as a kubeconfig's
        ``tokenFile``); ``ca_file`` the CA bundle of an https server's certificate."""
        cluster: dict[str, str] = {"server": url}
        if ca_file is not None:
            cluster["certificate-authority"] = os.fspath(ca_file)
        user = {"tokenFile": os.fspath(token_file)} if token_file is not None else {"token": token}
        config = KubeConfig.from_dict(
            {
                "clusters": [{"name": "c", "cluster": cluster}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": namespace}}],
                "users": [{"name": "u", "user": user}],
                "current-context": "c",
            }
        )
        return cls(AsyncClient(config, trust_env=False, timeout=httpx2.Timeout(timeout)))

    @classmethod
    def from_environment(cls, kubeconfig: str | None = None) -> KubeClient:
        """In-cluster service account, else ``kubeconfig`` / $KUBECONFIG / ~/.kube/config."""
        if kubeconfig:
            return cls(AsyncClient(KubeConfig.from_file(kubeconfig)))
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            return cls(AsyncClient(KubeConfig.from_service_account()))
        return cls(AsyncClient(KubeConfig.from_env()))

    async def close(self) -> None:
        if isinstance(self._lean, Lean):
            await self._lean.close()
        await self._client.close()

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- verbs ---------------------------------------------------------------------------------
    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        try:
            if resource.namespaced:
                obj = await self._client.get(_lk(resource), name, namespace=namespace)
            else:
                obj = await self._client.get(_lk(resource), name)
        except Exception as exc:
            raise _translate(exc) from exc
        return _plain(obj)

    async def list(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        labels: Mapping[str, str] | None = None,
        fields: Mapping[str, str] | None = None,
        chunk_size: int | None = None,
    ) -> tuple[list[dict[str, Any]], str]:
        """The matching objects and the list's resourceVersion (to watch from). All namespaces if none given."""
        kwargs: dict[str, Any] = {"labels": dict(labels) if labels else None, "fields": dict(fields) if fields else None}
        if chunk_size:
            kwargs["chunk_size"] = chunk_size
        if resource.namespaced:
            kwargs["namespace"] = namespace or "*"
        try:
            it = self._client.list(_lk(resource), **kwargs)
            items = [_plain(o) async for o in it]
            try:
                rv = it.resourceVersion
            except Exception:
                rv = ""
        except Exception as exc:
            raise _translate(exc) from exc
        return items, rv

    async def watch(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        fields: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None,
        resource_version: str | None = None,
        server_timeout: int | None = None,
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """(event type, object) pairs after ``resource_version``; a 410 Gone is raised as ApiError(410)."""
        kwargs: dict[str, Any] = {
            "fields": dict(fields) if fields else None,
            "labels": dict(labels) if labels else None,
            "resource_version": resource_version,
            "server_timeout": server_timeout,
        }
        if resource.namespaced:
            kwargs["namespace"] = namespace or "*"
        try:
            async for event_type, obj in self._client.watch(_lk(resource), **kwargs):
                yield event_type, _plain(obj)
        except Exception as exc:
            raise _translate(exc) from exc

    async def watch_lines(
        self,
        resource: Resource,
        *,
        fields: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None,
        resource_version: str | None = None,
        server_timeout: int | None = None,
    ) -> AsyncIterator[str]:
        """The event lines of one watch request (all namespaces), undecoded, until the server ends
        it: a watcher of large objects decodes only the events it needs. The caller resumes from
        the last resourceVersion it saw; an ERROR event is the caller's to raise."""
        inner: Any = self._client._client
        params: dict[str, str] = {"watch": "true"}
        if labels:
            params["labelSelector"] = build_selector(dict(labels))
        if fields:
            params["fieldSelector"] = build_selector(dict(fields), for_fields=True)
        if resource_version:
            params["resourceVersion"] = resource_version
        if server_timeout is not None:
            params["timeoutSeconds"] = str(server_timeout)
        path = self._path(resource, None, None, every_namespace=True)
        try:
            request = inner._client.build_request("GET", path, params=params, timeout=inner._watch_timeout)
            if self._lean is False:
                self._lean = lean_for(inner._client)
            watch = await self._lean.watch(request) if isinstance(self._lean, Lean) else None
            if watch is not None:  # a plain 200: its lines split here, not by httpx's line iterator
                try:
                    async for line in watch.lines():
                        yield line
                finally:
                    watch.close()
                return
            response = await inner.send(request, stream=True)
            try:
                if response.status_code >= 400:
                    await response.aread()
                    inner.raise_for_status(response)
                async for line in response.aiter_lines():
                    if line.strip():
                        yield line
            finally:
                await response.aclose()
        except Exception as exc:
            raise _translate(exc) from exc

    async def create(self, resource: Resource, obj: Mapping[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        body = _lk(resource)(_with_type(resource, obj))
        try:
            out = await self._client.create(body, dry_run=dry_run)  # the namespace comes from metadata
        except Exception as exc:
            raise _translate(exc) from exc
        return _plain(out)

    async def replace(self, resource: Resource, obj: Mapping[str, Any], *, status: bool = False) -> dict[str, Any]:
        """PUT the object (or only its status); a stale resourceVersion is ApiError 409."""
        cls = _lk(resource)
        target = cls.Status if status else cls
        body = target(_with_type(resource, obj))
        meta = obj.get("metadata") or {}
        name = str(meta.get("name", ""))
        try:
            if resource.namespaced:
                out = await self._client.replace(body, name, namespace=meta.get("namespace"))
            else:
                out = await self._client.replace(body, name)
        except Exception as exc:
            raise _translate(exc) from exc
        return _plain(out)

    async def create_encoded(self, resource: Resource, body: bytes, *, namespace: str | None = None) -> str:
        """POST an object already encoded as JSON; the server's answer undecoded (the caller reads
        only what it needs: a ResourceSlice answer is as large as the slice)."""
        return await self._send_encoded("POST", self._path(resource, None, namespace), body)

    async def replace_encoded(
        self, resource: Resource, name: str, body: bytes, *, namespace: str | None = None
    ) -> str:
        """PUT an object already encoded as JSON (with its resourceVersion: a stale one is
        ApiError 409); the server's answer undecoded."""
        return await self._send_encoded("PUT", self._path(resource, name, namespace), body)

    @staticmethod
    def _path(resource: Resource, name: str | None, namespace: str | None, *, every_namespace: bool = False) -> str:
        parts = ["apis", resource.group, resource.version] if resource.group else ["api", resource.version]
        if resource.namespaced and not every_namespace:
            if not namespace:
                raise ApiError(422, "Invalid", f"a namespaced {resource.kind} needs a namespace")
            parts += ["namespaces", namespace]
        parts.append(resource.plural)
        if name is not None:
            parts.append(name)
        return "/".join(parts)

    async def _send_encoded(self, method: str, path: str, body: bytes) -> str:
        inner: Any = self._client._client
        url = self._urls.get(path)
        if url is None:  # parsed once per object: the agent rewrites the same few slices
            params: dict[str, str] = {}  # as lightkube's own writes would carry
            if inner._field_manager is not None:
                params["fieldManager"] = inner._field_manager
            if inner._dry_run is True:
                params["dryRun"] = "All"
            url = inner._client._merge_url(path).copy_merge_params(params)
            if len(self._urls) >= 256:
                self._urls.clear()
            self._urls[path] = url
        if self._lean is False:
            self._lean = lean_for(inner._client)
        lean = self._lean
        if isinstance(lean, Lean) and not lean.busy:  # a concurrent write takes the httpx path
            try:
                answer = await lean.send(method, url, body)
            except Exception as exc:
                raise _translate(exc) from exc
            if answer is not None:
                status, headers, data = answer
                if status < 300 and not any(k.lower() == b"content-encoding" for k, _ in headers):
                    return data.decode()
                # an error (or an encoded answer): judged exactly as httpx's answer would be
                request = inner._client.build_request(method, url, content=body, headers=_JSON_BODY)
                response = httpx2.Response(status, headers=headers, content=data, request=request)
                try:
                    inner.raise_for_status(response)
                except Exception as exc:
                    raise _translate(exc) from exc
                return str(response.text)
        request = inner._client.build_request(method, url, content=body, headers=_JSON_BODY)
        try:
            response = await inner.send(request)
            inner.raise_for_status(response)
        except Exception as exc:
            raise _translate(exc) from exc
        return str(response.text)

    async def apply(
        self, resource: Resource, obj: Mapping[str, Any], *, field_manager: str, force: bool = False, status: bool = False
    ) -> dict[str, Any]:
        """Server-side apply (``application/apply-patch+yaml``) of ``obj``, or of its status only,
        as ``field_manager``: the fields it names become that manager's, the ones it owned and
        no longer names are removed; ``force`` takes over fields other managers own."""
        cls = _lk(resource)
        body = (cls.Status if status else cls)(_with_type(resource, obj))
        meta = obj.get("metadata") or {}
        name = str(meta.get("name", ""))
        try:
            if resource.namespaced:
                out = await self._client.apply(
                    body, name, namespace=meta.get("namespace"), field_manager=field_manager, force=force
                )
            else:
                out = await self._client.apply(body, name, field_manager=field_manager, force=force)
        except Exception as exc:
            raise _translate(exc) from exc
        return _plain(out)

    async def delete(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
    ) -> None:
        """Delete, optionally only if the object still has ``uid`` / ``resource_version`` (409 otherwise)."""
        if uid is None and resource_version is None:
            try:
                if resource.namespaced:
                    await self._client.delete(_lk(resource), name, namespace=namespace)
                else:
                    await self._client.delete(_lk(resource), name)
            except Exception as exc:
                raise _translate(exc) from exc
            return
        # lightkube's delete() has no preconditions: send DeleteOptions through its request builder.
        inner: Any = self._client._client
        br = inner.prepare_request("delete", res=_lk(resource), name=name, namespace=namespace if resource.namespaced else None)
        pre = {k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v is not None}
        br.data = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": pre}
        try:
            response = await inner.send(inner.build_adapter_request(br))
            inner.raise_for_status(response)
        except Exception as exc:
            raise _translate(exc) from exc


def _with_type(resource: Resource, obj: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(obj)
    out.setdefault("apiVersion", resource.api_version)
    out.setdefault("kind", resource.kind)
    return out
