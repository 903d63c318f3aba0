"""The ``http`` target: a POST to the user's running app (docs/targets.md#http-targets).

Each case is sent as a JSON body rendered from a template (:func:`render_body`), and the answer is read from
the JSON response by a JSON path (:func:`json_path`). Only ``http`` and ``https`` URLs are allowed; a redirect
is followed (up to 5) only to the same origin (scheme, host and port). Header values come only from environment
variables, and are registered as secrets (never in a message, log or report).

Status rules: 2xx is read; 401 and 403 raise :class:`~evaltasks.errors.CredentialsError` (the run stops); 408,
429 (with its ``Retry-After``) and 5xx are transient, as are timeouts and dropped connections; any other status,
a body that is not JSON, or a path that is missing fails the case.
"""

from __future__ import annotations

import email.utils
import functools
import json
import re
import threading
import time
from collections.abc import Collection, Mapping
from typing import Any

from evaltasks._env import env_value
from evaltasks._redact import register as register_secret
from evaltasks.errors import CredentialsError, bounded, quote
from evaltasks.targets._keys import CASE_INPUT_FIELDS, canonical_digest, template_variables
from evaltasks.targets.base import TargetError, TargetKind, TargetOutput, TransientTargetError
from evaltasks.targets.python import DEFAULT_MAX_ATTEMPTS, DEFAULT_TIMEOUT, check_common
from evaltasks.test_case import EvalTestCase
from evaltasks.traces import as_records

DEFAULT_BODY: dict[str, Any] = {"input": "{{ input }}"}
MAX_REDIRECTS = 5
_WHOLE_VARIABLE = re.compile(r"^\{\{\s*([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)\s*\}\}$")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@functools.lru_cache(maxsize=1)
def _sandbox() -> Any:
    """Jinja's sandbox with undefined variables as errors and no escaping (the judge prompts' settings)."""
    import jinja2
    import jinja2.sandbox

    return jinja2.sandbox.SandboxedEnvironment(undefined=jinja2.StrictUndefined, autoescape=False)


def render_body(template: Any, variables: Mapping[str, Any], where: str = "body") -> Any:
    """``template`` (JSON: mappings, lists, strings, numbers...) with every string rendered as a Jinja2 template
    over ``variables``; a string that is exactly one ``{{ name }}`` (or ``{{ vars.name }}``) keeps the value's
    own JSON type (a list stays a list). Mapping keys are not rendered.

    Raises:
        TargetError: an undefined variable or a template error, naming where in the body (``body.question``).
    """
    import jinja2

    if isinstance(template, Mapping):
        return {key: render_body(value, variables, f"{where}.{key}") for key, value in template.items()}
    if isinstance(template, list):
        return [render_body(value, variables, f"{where}[{i}]") for i, value in enumerate(template)]
    if not isinstance(template, str):
        return template
    whole = _WHOLE_VARIABLE.match(template)
    if whole:
        value: Any = variables
        for part in whole.group(1).split("."):
            if not isinstance(value, Mapping) or part not in value:
                raise TargetError(f"{where}: '{whole.group(1)}' is undefined (the case has no such field or column)")
            value = value[part]
        return value
    try:
        return _sandbox().from_string(template).render(dict(variables))
    except jinja2.UndefinedError as exc:
        raise TargetError(f"{where}: {exc.message} (the case has no such field or column)") from None
    except jinja2.TemplateError as exc:
        raise TargetError(f"{where}: {exc}") from None


def _strings(template: Any, where: str) -> list[tuple[str, str]]:
    """(where, text) of every string in a body template."""
    if isinstance(template, Mapping):
        return [item for key, value in template.items() for item in _strings(value, f"{where}.{key}")]
    if isinstance(template, list):
        return [item for i, value in enumerate(template) for item in _strings(value, f"{where}[{i}]")]
    return [(where, template)] if isinstance(template, str) else []


def _template_names(text: str) -> set[str]:
    """The undeclared variables of the template ``text``. Raises TargetError on a syntax error."""
    import jinja2
    import jinja2.meta

    try:
        return set(jinja2.meta.find_undeclared_variables(_sandbox().parse(text)))
    except jinja2.TemplateSyntaxError as exc:
        raise TargetError(f"not a valid template: {exc.message}") from None


def json_path(document: Any, path: str) -> Any:
    """The value at ``path`` in ``document``: keys separated by dots, an integer part indexing a list
    (``data.choices.0.text``).

    Raises:
        KeyError: with a message naming the first part that is missing and what is there instead.
    """
    value = document
    walked: list[str] = []
    for part in path.split("."):
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, list) and re.fullmatch(r"-?\d+", part) and -len(value) <= int(part) < len(value):
            value = value[int(part)]
        else:
            here = ".".join(walked) or "the response"
            if isinstance(value, Mapping):
                seen = f"keys: {', '.join(map(str, list(value)[:20])) or 'none'}"
            elif isinstance(value, list):
                seen = f"a list of {len(value)}"
            else:
                seen = f"a {type(value).__name__}"
            raise KeyError(f"no '{part}' in {here} ({seen})")
        walked.append(part)
    return value


def _retry_after(value: str | None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait (a number, or an HTTP date), or None."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class HttpTarget:
    """A POST of each case to the user's app.

    Args:
        url: the endpoint (``http`` or ``https``).
        body: the JSON body template (default ``{"input": "{{ input }}"}``): :func:`render_body` over the case's
            fields and the row's columns (:func:`~evaltasks.targets._keys.template_variables`).
        output: JSON path of the answer (a string; a number or boolean is written as JSON) in the response.
        retrieval_context: JSON path of a list of texts, if the app returns them.
        tools_called: JSON path of a list of tool names (or of objects with a ``name``), if it returns them.
        execution_trace: JSON path of the agent's steps (a list of trace step objects;
            docs/agents.md#execution-traces), if it returns them.
        tool_calls: JSON path of the calls made, a list of ``{name, arguments}`` objects, if it returns them.
        headers: ``{Header-Name: ENV_VAR_NAME}``: each value is read from the environment variable (on the first
            request) and registered as a secret.
        name, version, cache, repeat, timeout, max_attempts, max_concurrency: the shared target fields
            (docs/targets.md#suite-fields); ``timeout`` also bounds each HTTP request.

    Raises:
        ValueError: a URL that is not http(s) or has no host, a header or variable name that is not valid, a
            field out of range.
    """

    kind: TargetKind = "http"

    def __init__(
        self,
        url: str,
        *,
        body: Any = None,
        output: str = "output",
        retrieval_context: str | None = None,
        tools_called: str | None = None,
        execution_trace: str | None = None,
        tool_calls: str | None = None,
        headers: Mapping[str, str] | None = None,
        name: str = "http",
        version: str | None = None,
        cache: bool = True,
        repeat: int = 1,
        timeout: float = DEFAULT_TIMEOUT,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        max_concurrency: int = 8,
    ) -> None:
        import httpx

        check_common(timeout, max_attempts, repeat, max_concurrency)
        try:
            parsed = httpx.URL(url)
        except (httpx.InvalidURL, TypeError) as exc:
            raise ValueError(f"url {quote(url)} is not a valid URL: {exc}") from None
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise ValueError(f"url must be an http:// or https:// URL with a host, got {quote(url)}")
        for header, variable in (headers or {}).items():
            if not _HEADER_NAME.match(str(header)):
                raise ValueError(f"headers: {quote(header)} is not a valid header name")
            if not isinstance(variable, str) or not _ENV_NAME.match(variable):
                raise ValueError(
                    f"headers.{header}: must name an environment variable (its value is read from it), "
                    f"got {quote(variable)}"
                )
        self.url = str(parsed)
        self.body = DEFAULT_BODY if body is None else body
        self.output = output
        self.retrieval_context = retrieval_context
        self.tools_called = tools_called
        self.execution_trace = execution_trace
        self.tool_calls = tool_calls
        self.headers = dict(headers or {})
        self.name = name
        self.version = version
        self.cache = cache
        self.repeat = repeat
        self.timeout = float(timeout)
        self.max_attempts = max_attempts
        self.max_concurrency = max_concurrency
        self._origin = (parsed.scheme, parsed.host, parsed.port)
        self._client: Any = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"HttpTarget({self.url!r}, name={self.name!r})"

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_client"], state["_lock"] = None, None  # a worker process builds its own
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def fingerprint(self) -> str:
        """Hex SHA-256 of the kind, URL, ``version`` and the JSON paths read from the response."""
        return canonical_digest(
            {
                "kind": self.kind,
                "url": self.url,
                "version": self.version,
                "paths": [self.output, self.retrieval_context, self.tools_called]
                + ([self.execution_trace, self.tool_calls] if self.execution_trace or self.tool_calls else []),
            }
        )

    def case_key(self, case: EvalTestCase) -> str:
        """Hex SHA-256 of :meth:`fingerprint` and the body sent for ``case``. Raises TargetError when the body
        does not render for it."""
        return canonical_digest({"target": self.fingerprint(), "body": self.render(case)})

    def render(self, case: EvalTestCase) -> Any:
        """The JSON body sent for ``case``. Raises TargetError (an undefined variable, naming where)."""
        return render_body(self.body, template_variables(case))

    def undefined_variables(self, columns: Collection[str]) -> list[str]:
        """One message per variable the body template uses that is neither a case field nor one of ``columns``
        (the dataset's), naming where in the body: the check a run makes when it loads the dataset."""
        known = set(CASE_INPUT_FIELDS) | set(columns)
        problems: list[str] = []
        for where, text in _strings(self.body, "body"):
            whole = _WHOLE_VARIABLE.match(text)
            try:
                used = {whole.group(1).split(".")[0]} if whole else _template_names(text)
            except TargetError as exc:
                problems.append(f"{where}: {exc}")
                continue
            for name in sorted(used - known - set(_sandbox().globals)):
                problems.append(
                    f"{where}: '{name}' is undefined (the dataset has no such column; columns: "
                    f"{', '.join(sorted(columns)) or 'none'})"
                )
        return problems

    def estimate_cost(self, case: EvalTestCase) -> float:
        """0.0: what the app spends is not known in advance."""
        return 0.0

    def _http(self) -> Any:
        """The target's ``httpx.Client`` (built once; thread-safe), with its headers read from the environment.
        Raises CredentialsError when a header's variable is unset."""
        with self._lock:
            if self._client is None:
                import httpx

                values = {}
                for header, variable in self.headers.items():
                    value = env_value(variable)
                    if not value:
                        raise CredentialsError(
                            f"the http target {self.name} sends the header {header} from the environment variable "
                            f"{variable}, which is not set"
                        )
                    register_secret(value)
                    values[header] = value
                self._client = httpx.Client(headers=values, timeout=self.timeout, follow_redirects=False)
            return self._client

    def missing_credentials(self) -> str | None:
        """Why this target cannot send (a header's environment variable is unset), or None when it can; sends
        nothing."""
        try:
            self._http()
        except CredentialsError as exc:
            return exc.message
        return None

    def generate(self, case: EvalTestCase) -> TargetOutput:
        """POST the rendered body and read the answer (see the module docstring for the status rules).

        Raises:
            TransientTargetError: 408, 429, 5xx, a timeout or a dropped connection.
            TargetError: another status, a redirect to another origin, a body that is not JSON, a missing path.
            CredentialsError: 401 or 403, or a header's environment variable is unset.
        """
        response = self._post(self.render(case))
        try:
            document = response.json()
        except ValueError:
            raise TargetError(
                f"the http target {self.name}: the response of {self.url} is not JSON: {quote(response.text, 200)}"
            ) from None
        try:
            answer = json_path(document, self.output)
            retrieval = self._texts(document, self.retrieval_context, "retrieval_context")
            tools = self._texts(document, self.tools_called, "tools_called")
            trace = self._records(document, self.execution_trace, "execution_trace")
            calls = self._records(document, self.tool_calls, "tool_calls")
        except KeyError as exc:
            raise TargetError(f"the http target {self.name}: {exc.args[0]}") from None
        if isinstance(answer, (int, float, bool)):
            answer = json.dumps(answer)
        if not isinstance(answer, str):
            raise TargetError(
                f"the http target {self.name}: output '{self.output}' is a {type(answer).__name__}, not a string"
            )
        return TargetOutput(
            output=answer, retrieval_context=retrieval, tools_called=tools, execution_trace=trace, tool_calls=calls
        )

    def _records(self, document: Any, path: str | None, field: str) -> list[Any] | None:
        """The trace steps or tool calls at ``path`` (``field`` says which), or None without a path. Raises
        KeyError (missing) or TargetError (not a list of valid objects, naming the item and key)."""
        if path is None:
            return None
        records = as_records(field, json_path(document, path))
        if not isinstance(records, list):
            raise TargetError(f"the http target {self.name}: {field} '{path}'{records.field} {records.message}")
        return records

    def _texts(self, document: Any, path: str | None, field: str) -> list[str] | None:
        """The list of strings at ``path`` (items that are objects with a ``name`` give their name), or None
        without a path. Raises KeyError (missing) or TargetError (not a list of strings)."""
        if path is None:
            return None
        value = json_path(document, path)
        items = (
            [item.get("name") if isinstance(item, Mapping) else item for item in value]
            if isinstance(value, list)
            else None
        )
        if items is None or not all(isinstance(item, str) for item in items):
            raise TargetError(f"the http target {self.name}: {field} '{path}' is not a list of strings: {quote(value)}")
        return [str(item) for item in items]

    def _post(self, body: Any) -> Any:
        """POST ``body`` and follow same-origin redirects; returns the 2xx response. Raises as :meth:`generate`."""
        import httpx

        client = self._http()
        label = f"the http target {self.name}"
        try:
            response = client.post(self.url, json=body)
            for _ in range(MAX_REDIRECTS):
                following = response.next_request
                if not response.is_redirect or following is None:
                    break
                origin = (following.url.scheme, following.url.host, following.url.port)
                if origin != self._origin:
                    raise TargetError(
                        f"{label}: {self.url} redirected to {following.url.copy_with(query=None)}, another host or "
                        "scheme: not followed"
                    )
                response.close()
                response = client.send(following)
        except httpx.TimeoutException as exc:
            raise TransientTargetError(f"{label}: {self.url} timed out ({type(exc).__name__})") from None
        except httpx.TransportError as exc:
            raise TransientTargetError(f"{label}: {self.url}: {type(exc).__name__}: {exc}") from None
        status = response.status_code
        if status in (401, 403):
            raise CredentialsError(f"{label}: {self.url} refused the credentials (HTTP {status})")
        if status in (408, 429) or status >= 500:
            raise TransientTargetError(
                f"{label}: {self.url} answered HTTP {status}: {bounded(response.text, 200)}",
                retry_after=_retry_after(response.headers.get("retry-after")),
            )
        if response.is_redirect:
            raise TargetError(f"{label}: {self.url} redirected more than {MAX_REDIRECTS} times")
        if not 200 <= status < 300:
            raise TargetError(f"{label}: {self.url} answered HTTP {status}: {bounded(response.text, 300)}")
        return response
