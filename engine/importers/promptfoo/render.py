"""promptfoo's prompt, rendered as promptfoo renders it, so an imported test asks the model the same thing.

promptfoo templates are Nunjucks; here they render on the engine's budgeted, sandboxed Jinja environment
(engine.base.template_budget) made to print what Nunjucks prints (engine.importers.promptfoo.js): a missing
variable or `null` is empty text, `true` is "true", 2.0 is "2", a list is its items joined by commas, an object
is "[object Object]"; a variable's keys are read before any Python attribute (`obj.items` is the key `items`);
`.length` and a few JavaScript string and array methods work; Nunjucks' `dump` and promptfoo's `load` filters
exist. A template this cannot render as Nunjucks would (an unknown filter, JavaScript Jinja cannot run) raises
`NotCarried` with what and why, never a traceback.

The steps are promptfoo's `renderPrompt` (src/evaluatorHelpers.ts), in its order:

1. `file://` vars are read (`load_file_vars`): text trimmed, YAML as its JSON, images as data URLs; a script,
   a PDF, audio or video is not carried.
2. One trailing newline is dropped from every text var, and a var that holds `{{ other }}` has its first such
   placeholder filled from the other vars, in rounds, at most five (`prepare_vars`, `resolve_variables`).
3. A prompt that parses as JSON has every string inside rendered and is printed back as JSON (2-space
   indent); any other prompt has each text var rendered first, then is rendered with them (`render_prompt`).
4. The OpenAI provider reads the result as chat messages when it is a JSON list (or YAML `- role:` list), else
   as one user message (`chat_messages`); `engine_messages` turns the OpenAI content parts into the engine's
   text and image parts.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jinja2 import ChainableUndefined, TemplateError

from engine.base.template_budget import BudgetedEnvironment, TemplateBudgetError, render_bounded
from engine.base.yaml import load_yaml_text
from engine.importers.promptfoo.files import CONFIG, Files, Where
from engine.importers.promptfoo.js import NotCarried, js_json, js_string, js_text, js_trim

__all__ = ["Images", "chat_messages", "engine_messages", "load_file_vars", "prepare_vars", "render_prompt",
           "render_template", "resolve_variables"]

_CODE_FILES = (".js", ".cjs", ".mjs", ".ts", ".cts", ".mts", ".jsx", ".tsx", ".py", ".rb", ".go")
_IMAGE_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
                ".webp": "image/webp", ".bmp": "image/bmp", ".svg": "image/svg+xml", ".tif": "image/tiff",
                ".tiff": "image/tiff", ".ico": "image/x-icon", ".avif": "image/avif", ".heic": "image/heic",
                ".heif": "image/heif"}
_MEDIA = (".mp4", ".webm", ".mov", ".avi", ".mkv", ".m4v", ".wav", ".mp3", ".ogg", ".flac", ".m4a", ".aac")
# The image types an engine test may send (engine.suite.content_parts), by their first bytes, as promptfoo's
# detectMimeFromBase64 knows them.
_SENDABLE = {b"\x89PNG\r\n\x1a\n": ("image/png", ".png"), b"\xff\xd8\xff": ("image/jpeg", ".jpg"),
             b"GIF87a": ("image/gif", ".gif"), b"GIF89a": ("image/gif", ".gif")}
_PLACEHOLDER = re.compile(r"\{\{\s*(\w+)\s*\}\}", re.ASCII)
_PARTIAL_TAG = re.compile(r"({%[^%]*$|{{[^}]*$|{#[^#]*$)", re.MULTILINE)
_RAW_WRAPPED = re.compile(r"{%\s*raw\s*%}")
_ENDRAW_WRAPPED = re.compile(r"{%\s*endraw\s*%}")
_TEMPLATE_VARS = re.compile(r"\{\{[\s]*([^{}\s|]+)[\s]*(?:\|[^}]+)?\}\}|\{%[\s]*(?:if|for)[\s]+([^{}\s]+)[\s]*.*?%\}")
_FOR_VARS = re.compile(r"\{%[\s]*for[\s]+(\w+)[\s]+in[\s]+(\w+)[\s]*%\}")
_ROOT_NAME = re.compile(r"^([A-Za-z_]\w*)", re.ASCII)
_RESOLVE_ROUNDS = 5


def _json_parse(text: Any) -> Any:
    """promptfoo's `load` filter: JSON.parse."""
    try:
        return json.loads(str(text), parse_constant=_not_json)
    except (ValueError, RecursionError) as exc:
        raise NotCarried(f"the `load` filter was given text that is not JSON ({exc})") from None


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _nl2br(text: Any) -> str:
    return re.sub(r"\r\n|\n", "<br />\n", js_string(text))


def _finalize(value: Any) -> Any:
    return js_string(value)


# A few JavaScript string and array methods templates call (`{{ name.toUpperCase() }}`, `{{ items.join(", ") }}`).
_STRING_METHODS: dict[str, Callable[[str], Any]] = {
    "toUpperCase": lambda s: s.upper,
    "toLowerCase": lambda s: s.lower,
    "trim": lambda s: lambda: js_trim(s),
    "split": lambda s: lambda sep=None: [s] if sep is None else list(s) if sep == "" else s.split(js_string(sep)),
    "includes": lambda s: lambda part: js_string(part) in s,
    "startsWith": lambda s: lambda part: s.startswith(js_string(part)),
    "endsWith": lambda s: lambda part: s.endswith(js_string(part)),
    "toString": lambda s: lambda: s,
}
_LIST_METHODS: dict[str, Callable[[list[Any]], Any]] = {
    "join": lambda items: lambda sep=",": js_string(sep).join(js_string(item) for item in items),
    "includes": lambda items: lambda item: item in items,
}


class _Nunjucks(BudgetedEnvironment):
    """The budgeted sandbox, reading values as Nunjucks reads JavaScript values."""

    def getattr(self, obj: Any, attribute: str) -> Any:
        if isinstance(obj, Mapping):   # a JavaScript object: its keys, never a Python method
            return obj[attribute] if attribute in obj else self.undefined(obj=obj, name=attribute)
        if isinstance(obj, (str, list, tuple)) and attribute == "length":
            return len(obj)
        if isinstance(obj, str) and attribute in _STRING_METHODS:
            return _STRING_METHODS[attribute](obj)
        if isinstance(obj, (list, tuple)) and attribute in _LIST_METHODS:
            return _LIST_METHODS[attribute](list(obj))
        if isinstance(obj, (str, int, float, list, tuple, bool)) or obj is None:
            return self.undefined(obj=obj, name=attribute)   # no Python method of a JavaScript value
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        if isinstance(obj, Mapping):
            key = js_string(argument) if not isinstance(argument, str) else argument
            return obj[key] if key in obj else self.undefined(obj=obj, name=key)
        if isinstance(obj, (list, tuple, str)) and isinstance(argument, int) and not isinstance(argument, bool):
            return obj[argument] if 0 <= argument < len(obj) else self.undefined(obj=obj, name=str(argument))
        if isinstance(argument, str):
            return self.getattr(obj, argument)
        return super().getitem(obj, argument)


_ENV = _Nunjucks(undefined=ChainableUndefined, autoescape=False, keep_trailing_newline=True, finalize=_finalize)
_ENV.filters.update({"dump": js_json, "load": _json_parse, "nl2br": _nl2br})


def render_template(text: str, variables: Mapping[str, Any]) -> str:
    """Render one Nunjucks template as promptfoo does. Raises NotCarried when it cannot be, saying why."""
    if "{{" not in text and "{%" not in text and "{#" not in text:
        return text
    try:
        return render_bounded(_ENV.from_string(text), variables)
    except NotCarried:
        raise
    except TemplateBudgetError as exc:
        raise NotCarried(f"the template is too big to render ({exc})") from None
    except TemplateError as exc:
        raise NotCarried(_template_problem(exc)) from None
    except (TypeError, ValueError, ArithmeticError, LookupError, AttributeError, RecursionError) as exc:
        raise NotCarried(f"the template does something Nunjucks and Jinja do differently ({type(exc).__name__}: "
                         f"{exc}); write the prompt without it") from None


def _template_problem(exc: TemplateError) -> str:
    message = str(exc.message if hasattr(exc, "message") and exc.message else exc)
    line = getattr(exc, "lineno", None)
    where = f" (line {line} of the template)" if line else ""
    filter_name = re.match(r"No filter named '([^']+)'", message)
    if filter_name:
        return (f"the template uses the filter `{filter_name.group(1)}`{where}, which Nunjucks has here only as "
                "`dump`, `load`, `nl2br` and Jinja's own; custom nunjucksFilters are JavaScript: rewrite the prompt "
                "without it")
    return f"the template cannot be rendered as Nunjucks renders it{where}: {message}"


def _wrap_partial(text: str) -> str:
    """promptfoo's autoWrapRawIfPartialNunjucks: a template with an unclosed tag is rendered as plain text."""
    if _PARTIAL_TAG.search(text) and not (_RAW_WRAPPED.search(text) and _ENDRAW_WRAPPED.search(text)):
        return "{% raw %}" + text + "{% endraw %}"
    return text


def _template_names(template: str) -> list[str]:
    """promptfoo's extractVariablesFromTemplate: the names a template reads, by its regular expressions."""
    names: dict[str, None] = {}
    text = re.sub(r"\{#[\s\S]*?#\}", "", template)
    for match in _TEMPLATE_VARS.finditer(text):
        names[match.group(1) or match.group(2)] = None
    for match in _FOR_VARS.finditer(text):
        names.pop(match.group(1), None)
        names[match.group(2)] = None
    return list(names)


def _references_undefined(template: str, variables: Mapping[str, Any]) -> bool:
    """promptfoo's referencesUndefinedVariables: the template names a var the test does not have."""
    for name in _template_names(template):
        root = _ROOT_NAME.match(name)
        if root and root.group(1) != "env" and root.group(1) not in variables:
            return True
    return False


def _js_replacement(replacement: str, match: str, before: str, after: str) -> str:
    """JavaScript's String.replace(string, replacement): `$$`, `$&`, `` $` `` and `$'` in the replacement."""
    return re.sub(r"\$([$&`'])", lambda m: {"$": "$", "&": match, "`": before, "'": after}[m.group(1)],
                  replacement)


def resolve_variables(variables: dict[str, Any]) -> dict[str, Any]:
    """promptfoo's resolveVariables: a text var's first `{{ name }}` is filled from another var, in rounds, at
    most five, while any var changed (in place; returned too)."""
    for _ in range(_RESOLVE_ROUNDS):
        changed = False
        for key in list(variables):
            value = variables[key]
            if not isinstance(value, str):
                continue
            match = _PLACEHOLDER.search(value)
            if match is None or match.group(1) not in variables:
                continue
            start, end = match.span()
            filled = _js_replacement(js_text(variables[match.group(1)]), match.group(0), value[:start], value[end:])
            variables[key] = value[:start] + filled + value[end:]
            changed = True
        if not changed:
            break
    return variables


def _render_in_object(value: Any, variables: Mapping[str, Any]) -> Any:
    """promptfoo's renderVarsInObject: every string inside rendered, keys and other values kept."""
    if isinstance(value, str):
        return render_template(value, variables)
    if isinstance(value, list):
        return [_render_in_object(item, variables) for item in value]
    if isinstance(value, Mapping):
        return {key: _render_in_object(item, variables) for key, item in value.items()}
    return value


def _parse_json(text: str) -> tuple[bool, Any]:
    """(True, value) when `text` is JSON as JSON.parse reads it, else (False, None)."""
    try:
        return True, json.loads(text, parse_constant=_not_json)
    except (ValueError, RecursionError):
        return False, None


def prepare_vars(variables: dict[str, Any]) -> dict[str, Any]:
    """A test's vars as promptfoo's renderPrompt leaves them (file vars already read by `load_file_vars`): one
    trailing newline dropped from each text var, vars that name vars filled in (in place; returned too). The
    prompt renders with these, and the test's asserts see them so changed, as promptfoo's do."""
    for key, value in variables.items():
        if isinstance(value, str) and value.endswith("\n"):
            variables[key] = value[:-1]
    return resolve_variables(variables)


def render_prompt(raw: str, variables: Mapping[str, Any]) -> str:
    """The prompt text promptfoo sends, from its raw template and a test's vars (`prepare_vars` applied)."""
    parsed, value = _parse_json(raw)
    if parsed:
        return js_json(_render_in_object(value, variables), 2)
    rendered_vars = {key: (render_template(_wrap_partial(value), variables)
                           if isinstance(value, str) and not _references_undefined(value, variables) else value)
                     for key, value in variables.items()}
    return render_template(_wrap_partial(raw), rendered_vars)


def _looks_like_json(text: str) -> bool:
    """promptfoo's looksLikeJson: text that is clearly meant to be JSON (then a parse error is an error)."""
    stripped = text.strip()
    if stripped.startswith("{") and stripped.endswith("}"):
        return True
    if stripped.startswith("[") and stripped.endswith("]"):
        after = stripped[1:].lstrip()
        return (not after or after[0] in "\"{[" or bool(re.match(r"[\d-]", after))
                or after.startswith(("true", "false", "null")))
    return False


def chat_messages(rendered: str) -> list[dict[str, Any]]:
    """The messages the OpenAI chat provider sends for a rendered prompt (promptfoo's parseChatPrompt).

    Raises:
        NotCarried: promptfoo itself would fail on this prompt (JSON that does not parse, or that is not a list
            of messages).
    """
    if rendered.strip().startswith("- role:"):
        loaded = load_yaml_text(rendered, "the rendered prompt", kind=CONFIG)
        if loaded.diagnostics:
            raise NotCarried(f"the prompt reads as a YAML list of messages that is not valid YAML "
                             f"({loaded.diagnostics[0].message})")
        messages: Any = loaded.data
    else:
        parsed, messages = _parse_json(rendered)
        if not parsed:
            if _looks_like_json(rendered):
                raise NotCarried("the rendered prompt looks like JSON but does not parse, so promptfoo itself "
                                 "fails on it; fix the prompt's JSON")
            return [{"role": "user", "content": rendered}]
    if not isinstance(messages, list) or not all(isinstance(m, Mapping) and "role" in m for m in messages):
        raise NotCarried("the rendered prompt is JSON but not a list of {role, content} messages, which the "
                         "chat API refuses")
    return [dict(m) for m in messages]


@dataclass
class Images:
    """Images the prompts carry as data URLs or files, kept to be written beside the suites (`images/`)."""

    files: dict[str, bytes] = field(default_factory=dict)

    def add(self, data: bytes) -> str:
        """The suite-relative name an image's bytes are written under."""
        kind = next((v for magic, v in _SENDABLE.items() if data.startswith(magic)), None)
        if kind is None and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
            kind = ("image/webp", ".webp")
        if kind is None:
            raise NotCarried("an image that is not PNG, JPEG, GIF or WEBP (by its first bytes), which is all an "
                             "engine test sends; convert it")
        name = f"images/{hashlib.sha256(data).hexdigest()[:16]}{kind[1]}"
        self.files[name] = data
        return name


def _image_part(url: Any, detail: Any, images: Images) -> dict[str, Any]:
    if not isinstance(url, str):
        raise NotCarried("an image_url part without a text `url`")
    part: dict[str, Any]
    if url.startswith(("http://", "https://")):
        part = {"image": url}
    elif url.startswith("data:"):
        header, _, payload = url.partition(",")
        if ";base64" not in header:
            raise NotCarried("an image data URL that is not base64")
        try:
            data = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise NotCarried("an image data URL whose base64 does not decode") from None
        part = {"image": images.add(data)}
    else:
        raise NotCarried(f"an image URL that is neither http(s) nor a data URL ({url[:60]!r})")
    if detail in ("low", "high", "auto"):
        part["detail"] = detail
    return part


def engine_messages(messages: list[dict[str, Any]], images: Images) -> list[dict[str, Any]]:
    """OpenAI chat messages as an engine test's `messages`: text, and text and image parts.

    Raises:
        NotCarried: a role, key or part the engine cannot send (a tool turn, audio, a file part).
    """
    out = []
    for message in messages:
        role = message.get("role")
        if role not in ("system", "user", "assistant"):
            raise NotCarried(f"a message with role {role!r}; only system, user and assistant turns are carried")
        extra = sorted(str(k) for k in message if k not in ("role", "content"))
        if extra:
            raise NotCarried(f"a {role} message with {', '.join(extra)}, which is not carried")
        content = message.get("content")
        if isinstance(content, list):
            parts: list[dict[str, Any]] = []
            for part in content:
                kind = part.get("type") if isinstance(part, Mapping) else None
                if kind == "text" and isinstance(part.get("text"), str):
                    parts.append({"text": part["text"]})
                elif kind == "image_url" and isinstance(part.get("image_url"), Mapping):
                    image = part["image_url"]
                    parts.append(_image_part(image.get("url"), image.get("detail"), images))
                elif kind == "image_url":
                    parts.append(_image_part(part.get("image_url"), None, images))
                else:
                    raise NotCarried(f"a content part of type {kind!r}; text and image_url parts are carried")
            out.append({"role": role, "content": parts})
        elif content is None or isinstance(content, (str, int, float, bool)):
            out.append({"role": role, "content": js_string(content) if not isinstance(content, str) else content})
        else:
            raise NotCarried(f"a {role} message whose content is {type(content).__name__}, not text or parts")
    return out


def _data_url(data: bytes, suffix: str) -> str:
    """promptfoo's image var: a data URL, its type by the first bytes, else by the file's extension."""
    mime = next((v[0] for magic, v in _SENDABLE.items() if data.startswith(magic)), None)
    if mime is None and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        mime = "image/webp"
    mime = mime or _IMAGE_TYPES.get(suffix, "image/jpeg")
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def load_file_vars(variables: dict[str, Any], files: Files, base: Path, where: Where) -> dict[str, Any]:
    """Read every `file://` var as promptfoo's renderPrompt does (in place; returned too).

    Text files are trimmed; YAML becomes its JSON text; an image becomes a data URL. A script (JavaScript,
    Python: promptfoo runs it for the value), a PDF (promptfoo extracts its text) or audio and video are not
    carried: NotCarried says which.
    """
    for name, value in list(variables.items()):
        if not isinstance(value, str) or not value.startswith("file://"):
            continue
        ref = value[len("file://"):]
        function = re.search(r"\.\w+(:\w+)$", ref)   # file://vars.py:get_var names a function of the script
        suffix = Path(ref[:function.start(1)] if function else ref).suffix.lower()
        if suffix in _CODE_FILES:
            raise NotCarried(f"var `{name}` comes from running {ref} (promptfoo runs the script for its value); "
                             "run it once and write its output as the var")
        if suffix == ".pdf":
            raise NotCarried(f"var `{name}` is the text promptfoo extracts from the PDF {ref}; extract it into a "
                             ".txt file and name that")
        if suffix in _MEDIA:
            raise NotCarried(f"var `{name}` is audio or video ({ref}), which an engine test does not send")
        path = files.path(ref, base, where)
        if suffix in _IMAGE_TYPES:
            variables[name] = _data_url(files.read_bytes(path, where), suffix)
        elif suffix in (".yaml", ".yml"):
            variables[name] = js_json(files.yaml(path, where).data)
        else:
            variables[name] = js_trim(files.read_text(path, where))
    return variables
