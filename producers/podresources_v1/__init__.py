"""kubelet PodResources v1 gRPC API: ``api.proto`` and its generated stubs (``api_pb2``, ``api_pb2_grpc``)."""
