"""The DRA frontend: ``native.cpu`` devices, ResourceSlices, the kubelet plugin, Prepare/Unprepare.

Importing this package is cheap; the gRPC and Kubernetes layers live in
their own modules and are imported only by those who need them.
"""
