"""Generated protobuf modules for NRI (``api_pb2``) and the ttrpc envelope (``ttrpc_pb2``).

Regenerate with ``scripts/genproto.py``; never edit the ``*_pb2*`` files by hand.
"""
