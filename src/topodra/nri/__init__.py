"""NRI (containerd Node Resource Interface) in pure Python.

Layers, bottom up: ``mux`` and ``ttrpc`` (sans-IO codecs), ``session`` (both
codecs plus the stream-id rules, still sans-IO), ``transport`` (the thin asyncio
driver), then ``stub`` (plugin side) and ``runtime`` (an embedded runtime that
enforces containerd's rules). Plugins are written against ``plugin.Plugin`` and
the protobuf-free dataclasses in ``types``.
"""
