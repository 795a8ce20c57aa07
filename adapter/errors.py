"""The adapter's exceptions.

Every error the adapter raises on purpose is an ``AdapterError``. At the HTTP edge each one becomes a
Kubernetes ``Status`` object with the code and reason below; anything else is a bug, logged in full and
answered with a generic 500 that carries no traceback. Errors of aiohttp's routing (405 for a method other than
GET, 406, 413) become ``Status`` objects at the same edge::

    AdapterError
    ├── ConfigError              flags or the rules file are wrong (start-up fails, a reload is refused)
    ├── RequestError             the client asked for something wrong or absent (4xx)
    │   ├── BadRequest           400 BadRequest: malformed path, selector or parameter
    │   ├── Unauthorized         401 Unauthorized: no credential, or none that checks out
    │   ├── Forbidden            403 Forbidden: a SubjectAccessReview (or its cached answer) denied the request
    │   └── NotFound             404 NotFound: unknown path, metric, resource or object
    ├── NotConfigured            503 ServiceUnavailable: the adapter was started without what the request needs
    │   └── AuthNotReady         503 ServiceUnavailable: the authentication configuration is not loaded yet
    └── BackendError             a backend failed; the client gets a generic message, the log gets the detail
        ├── PrometheusError      503 ServiceUnavailable: Prometheus unreachable, slow or answering errors
        │   ├── BadAnswer        503 ServiceUnavailable: an answer of the wrong shape; the client is told where it broke
        │   │   └── AnswerTooLarge   503 ServiceUnavailable: an answer over --prometheus-max-answer-bytes (or
        │   │                        --prometheus-max-bytes-in-flight), named
        │   ├── NoRoomForAnswer  503 ServiceUnavailable: no room under --prometheus-max-bytes-in-flight by the deadline
        │   └── QueryError       500 InternalError: Prometheus refused a query built from a rule
        └── KubernetesError      503 ServiceUnavailable: the Kubernetes API could not list objects
            ├── ResourceExpired  the watch's resourceVersion is gone (410); the reflector relists
            └── ReviewError      503 ServiceUnavailable: a TokenReview or SubjectAccessReview failed (fail closed)

Raised and handled inside the adapter, never reaching a client as such:
    NotFinite            a Prometheus value is NaN or infinite: the object is left out of the answer (logged)
    └── OutOfRange       a value beyond float64's range, which no Prometheus stores: infinite, as float64 reads it
    MalformedAnswer      a Prometheus answer is not its API's JSON of the expected shape: a BadAnswer
    TemplateError        a metricsQuery or name template does not compile or render: a ConfigError or QueryError
    CertificateRejected  a client certificate does not chain to a trusted bundle: that authenticator says no
"""

from __future__ import annotations


class AdapterError(Exception):
    """Base of every error the adapter raises on purpose."""

    code = 500
    reason = "InternalError"

    @property
    def client_message(self) -> str:
        """The message a client may see; backend errors keep their detail for the log."""
        return str(self)


class ConfigError(AdapterError):
    """Flags, environment variables or the rules file are invalid."""


class RequestError(AdapterError):
    """The request cannot be answered because of what it asked for."""


class BadRequest(RequestError):
    code = 400
    reason = "BadRequest"


class Unauthorized(RequestError):
    """The message stays generic, as Kubernetes' is: why a credential failed is for the log, not the caller."""

    code = 401
    reason = "Unauthorized"

    def __init__(self, message: str = "Unauthorized") -> None:
        super().__init__(message)


class Forbidden(RequestError):
    code = 403
    reason = "Forbidden"


class NotFound(RequestError):
    code = 404
    reason = "NotFound"


class MethodNotSupported(RequestError):
    """A verb the metrics APIs do not serve on a resource (``watch``), as the API server answers it: 405."""

    code = 405
    reason = "MethodNotAllowed"


class BackendError(AdapterError):
    """A backend failed; clients get ``generic``, the log gets ``str(self)``."""

    code = 503
    reason = "ServiceUnavailable"
    generic = "the server is currently unable to handle the request"

    @property
    def client_message(self) -> str:
        return self.generic


class PrometheusError(BackendError):
    generic = "the metrics backend (Prometheus) is currently unavailable"


class BadAnswer(PrometheusError):
    """Prometheus answered with something other than its API's JSON of the expected shape, or more of it than allowed.

    Unlike other backend errors the client is told what was wrong, since retrying will not help and the operator has
    to act; ``problem`` speaks of the answer's shape (``data.result[3].metric is not an object``) or size, never of
    its content.
    """

    def __init__(self, message: str, problem: str) -> None:
        super().__init__(message)
        self.problem = problem

    @property
    def client_message(self) -> str:
        return f"the metrics backend (Prometheus) sent an answer the adapter cannot use: {self.problem}"


class AnswerTooLarge(BadAnswer):
    """An answer over ``--prometheus-max-answer-bytes``, or over ``--prometheus-max-bytes-in-flight`` where that is
    less, refused by its Content-Length or once that much was read."""


class NoRoomForAnswer(PrometheusError):
    """Other answers held all of ``--prometheus-max-bytes-in-flight`` until the request's deadline. The client is told
    so: trying again later can succeed, and the operator may want a larger bound."""

    generic = "the adapter is reading as many Prometheus answers as --prometheus-max-bytes-in-flight allows; try again"


class QueryError(PrometheusError):
    code = 500
    reason = "InternalError"
    generic = "the metrics backend (Prometheus) refused the query built for this metric; see the adapter's log"


class KubernetesError(BackendError):
    generic = "the Kubernetes API is currently unavailable to list the requested objects"


class ResourceExpired(KubernetesError):
    """HTTP 410 Gone: the resourceVersion a watch started from was compacted away."""

    @staticmethod
    def caused(error: BaseException) -> bool:
        """Whether ``error`` is one: what ``common.list_watch`` asks to tell a 410 from other failures."""
        return isinstance(error, ResourceExpired)


class ReviewError(KubernetesError):
    """A review could not be made; the request is refused, never allowed. The detail never holds a credential."""

    generic = "the Kubernetes API is currently unavailable to authenticate or authorize the request"


class NotConfigured(AdapterError):
    """The adapter was started without what this request needs (say, a Kubernetes API for labelSelector)."""

    code = 503
    reason = "ServiceUnavailable"


class AuthNotReady(NotConfigured):
    """No request is authenticated before the CAs and request-header names are known (fail closed)."""


class NotFinite(ValueError):
    """The value is NaN or infinite and has no quantity form."""


class OutOfRange(NotFinite):
    """A magnitude beyond float64's, which no Prometheus stores (a broken or hostile server sent it): infinite, as Go's
    ``strconv.ParseFloat`` and Python's ``float`` read it."""


class MalformedAnswer(ValueError):
    """What is wrong with a Prometheus answer, said of its shape and never quoting it."""


class TemplateError(ValueError):
    """A template that does not compile, or that cannot render with the data given."""


class CertificateRejected(Exception):
    """The certificate does not chain to the bundle, or may not be used by a client."""


# how much of a client's value an error quotes: enough to recognise it, never all of a hostile one
QUOTED_CHARACTERS = 64


def quoted(value: str, *, tail: bool = False) -> str:
    """A client's value as an error message shows it: its ``repr``, or past ``QUOTED_CHARACTERS`` a cut of it (its
    end with ``tail``) and its length, so that a message stays short whatever the request held."""
    if len(value) <= QUOTED_CHARACTERS:
        return repr(value)
    cut = value[-QUOTED_CHARACTERS // 2 :] if tail else value[: QUOTED_CHARACTERS // 2]
    return f"{'...' if tail else ''}{cut!r}{'' if tail else '...'} ({len(value)} characters)"
