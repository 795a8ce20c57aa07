"""KEDA's external scaler API: externalscaler.proto and the modules ``make protos`` generates from it."""
