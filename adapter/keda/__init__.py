"""KEDA's external scaler (``externalscaler.ExternalScaler``) over gRPC, answered by the same provider as the HTTP
metrics APIs: its flags, the trigger metadata it reads, the servicer and the server."""
