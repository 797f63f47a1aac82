from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ContextPassage(_message.Message):
    __slots__ = ("text", "source", "title")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    text: str
    source: str
    title: str
    def __init__(self, text: _Optional[str] = ..., source: _Optional[str] = ..., title: _Optional[str] = ...) -> None: ...

class GenerateRequest(_message.Message):
    __slots__ = ("prompt", "context", "max_tokens", "temperature")
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    prompt: str
    context: _containers.RepeatedCompositeFieldContainer[ContextPassage]
    max_tokens: int
    temperature: float
    def __init__(self, prompt: _Optional[str] = ..., context: _Optional[_Iterable[_Union[ContextPassage, _Mapping]]] = ..., max_tokens: _Optional[int] = ..., temperature: _Optional[float] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("prompt_tokens", "completion_tokens")
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    prompt_tokens: int
    completion_tokens: int
    def __init__(self, prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ...) -> None: ...

class ProviderAttempt(_message.Message):
    __slots__ = ("provider", "outcome", "latency_ms", "retries")
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    RETRIES_FIELD_NUMBER: _ClassVar[int]
    provider: str
    outcome: str
    latency_ms: float
    retries: int
    def __init__(self, provider: _Optional[str] = ..., outcome: _Optional[str] = ..., latency_ms: _Optional[float] = ..., retries: _Optional[int] = ...) -> None: ...

class GenerateResponse(_message.Message):
    __slots__ = ("text", "provider", "model", "offline", "usage", "attempts", "cost_usd", "finish_reason")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    OFFLINE_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    text: str
    provider: str
    model: str
    offline: bool
    usage: Usage
    attempts: _containers.RepeatedCompositeFieldContainer[ProviderAttempt]
    cost_usd: float
    finish_reason: str
    def __init__(self, text: _Optional[str] = ..., provider: _Optional[str] = ..., model: _Optional[str] = ..., offline: _Optional[bool] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., attempts: _Optional[_Iterable[_Union[ProviderAttempt, _Mapping]]] = ..., cost_usd: _Optional[float] = ..., finish_reason: _Optional[str] = ...) -> None: ...

class StreamGenerateRequest(_message.Message):
    __slots__ = ("prompt", "context", "max_tokens", "temperature")
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    prompt: str
    context: _containers.RepeatedCompositeFieldContainer[ContextPassage]
    max_tokens: int
    temperature: float
    def __init__(self, prompt: _Optional[str] = ..., context: _Optional[_Iterable[_Union[ContextPassage, _Mapping]]] = ..., max_tokens: _Optional[int] = ..., temperature: _Optional[float] = ...) -> None: ...

class StreamGenerateResponse(_message.Message):
    __slots__ = ("text_delta", "response")
    TEXT_DELTA_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    text_delta: str
    response: GenerateResponse
    def __init__(self, text_delta: _Optional[str] = ..., response: _Optional[_Union[GenerateResponse, _Mapping]] = ...) -> None: ...
