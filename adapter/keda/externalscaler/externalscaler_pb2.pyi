from collections.abc import Iterable as _Iterable
from collections.abc import Mapping as _Mapping
from typing import (
    ClassVar as _ClassVar,
)

from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from google.protobuf.internal import containers as _containers

DESCRIPTOR: _descriptor.FileDescriptor

class ScaledObjectRef(_message.Message):
    __slots__ = ("name", "namespace", "scalerMetadata")
    class ScalerMetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: str | None = ..., value: str | None = ...) -> None: ...

    NAME_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    SCALERMETADATA_FIELD_NUMBER: _ClassVar[int]
    name: str
    namespace: str
    scalerMetadata: _containers.ScalarMap[str, str]
    def __init__(
        self,
        name: str | None = ...,
        namespace: str | None = ...,
        scalerMetadata: _Mapping[str, str] | None = ...,
    ) -> None: ...

class IsActiveResponse(_message.Message):
    __slots__ = ("result",)
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: bool
    def __init__(self, result: bool = ...) -> None: ...

class GetMetricSpecResponse(_message.Message):
    __slots__ = ("metricSpecs",)
    METRICSPECS_FIELD_NUMBER: _ClassVar[int]
    metricSpecs: _containers.RepeatedCompositeFieldContainer[MetricSpec]
    def __init__(self, metricSpecs: _Iterable[MetricSpec | _Mapping] | None = ...) -> None: ...

class MetricSpec(_message.Message):
    __slots__ = ("metricName", "targetSize", "targetSizeFloat")
    METRICNAME_FIELD_NUMBER: _ClassVar[int]
    TARGETSIZE_FIELD_NUMBER: _ClassVar[int]
    TARGETSIZEFLOAT_FIELD_NUMBER: _ClassVar[int]
    metricName: str
    targetSize: int
    targetSizeFloat: float
    def __init__(
        self,
        metricName: str | None = ...,
        targetSize: int | None = ...,
        targetSizeFloat: float | None = ...,
    ) -> None: ...

class GetMetricsRequest(_message.Message):
    __slots__ = ("metricName", "scaledObjectRef")
    SCALEDOBJECTREF_FIELD_NUMBER: _ClassVar[int]
    METRICNAME_FIELD_NUMBER: _ClassVar[int]
    scaledObjectRef: ScaledObjectRef
    metricName: str
    def __init__(
        self, scaledObjectRef: ScaledObjectRef | _Mapping | None = ..., metricName: str | None = ...
    ) -> None: ...

class GetMetricsResponse(_message.Message):
    __slots__ = ("metricValues",)
    METRICVALUES_FIELD_NUMBER: _ClassVar[int]
    metricValues: _containers.RepeatedCompositeFieldContainer[MetricValue]
    def __init__(self, metricValues: _Iterable[MetricValue | _Mapping] | None = ...) -> None: ...

class MetricValue(_message.Message):
    __slots__ = ("metricName", "metricValue", "metricValueFloat")
    METRICNAME_FIELD_NUMBER: _ClassVar[int]
    METRICVALUE_FIELD_NUMBER: _ClassVar[int]
    METRICVALUEFLOAT_FIELD_NUMBER: _ClassVar[int]
    metricName: str
    metricValue: int
    metricValueFloat: float
    def __init__(
        self,
        metricName: str | None = ...,
        metricValue: int | None = ...,
        metricValueFloat: float | None = ...,
    ) -> None: ...
