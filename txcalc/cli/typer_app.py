"""The typer application every command registers on (``@app.command()`` in each
``*_cmd.py``). A leaf module, so that the command modules import it without importing the
package that imports them.

Start-up stays short (issue 18: a simple command under 0.1 s over ``python -c pass``):

- commands load lazily: the app's click group imports a command's module only when that
  command runs (``COMMAND_MODULES`` says which module registers which command); listing the
  commands (``txcalc --help``, a mistyped command's suggestions) imports them all, in the
  order they always registered, so the help text is what it was;
- typer >= 0.2x coerces every option through a pydantic TypeAdapter (``typer._adapters``:
  pydantic is a third of the start-up). ``fast_params`` gives each option of ours a coercion
  that does without it for the values whose pydantic result is certain (a plain str, an
  ASCII integer, a decimal float; ``tests/cli/test_cli_startup.py`` checks them against pydantic)
  and hands every other value to typer's own pydantic coercion, so an error reads exactly as
  typer says it.
"""

from __future__ import annotations

import importlib
import math
import re

import typer

#: Every top-level command and the module (txcalc.cli.<module>) that registers it, in the
#: order ``txcalc --help`` lists them (the order they registered in when every module was
#: imported at start-up).
COMMAND_MODULES = {
    "calibrate": "calibrate_cmd",
    "presets": "params_cmd", "params": "params_cmd",
    "fit": "fit_cmd",
    "flops": "costs_cmd", "memory": "costs_cmd",
    "report": "report_cmd",
    "validate": "validate_cmd",
    "compare": "compare_cmd",
    "serve": "serve_cmd",
    "plan": "plan_cmd",  # a group (plan train, plan infer): typer lists groups last
}


def load_command_modules(names=None) -> None:
    """Import the modules that register ``names`` (default: every command)."""
    wanted = COMMAND_MODULES if names is None else {n: COMMAND_MODULES[n] for n in names}
    for module in dict.fromkeys(COMMAND_MODULES.values()):
        if module in wanted.values():
            importlib.import_module(f"{__package__}.{module}")


def _typer_group():
    try:
        from typer.core import TyperGroup
    except ImportError:  # pragma: no cover  (typer before 0.9)
        return None
    return TyperGroup


def _summary(cmd):
    """``cmd`` with its listing line (``txcalc --help``) the first paragraph of its help as one
    line, which the terminal wraps to its width: typer keeps the docstring's own line breaks
    there, which at 80 columns broke the sentences into ragged lines."""
    if cmd.short_help is None and cmd.help:
        cmd.short_help = " ".join(cmd.help.split("\n\n")[0].split())
    return cmd


class LazyGroup(_typer_group()):
    """txcalc's click group: a command's module is imported when the command is looked up."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        fast_params(self)
        self._order()

    def _order(self) -> None:
        """Commands in COMMAND_MODULES order, whatever order their modules loaded in (one the
        table lacks last, in registration order)."""
        rank = {name: i for i, name in enumerate(COMMAND_MODULES)}
        ordered = sorted(self.commands, key=lambda n: rank.get(n, len(rank)))
        self.commands = {n: self.commands[n] for n in ordered}

    def _sync(self, name: str | None = None) -> None:
        """Add the click commands of what is registered on ``app`` since this group was built:
        the command ``name`` only (a module registers several: ``params`` does not build
        ``presets``), or all. Each is built as typer.main.get_group_from_info builds it."""
        import typer.main as tm

        kw = dict(pretty_exceptions_short=app.pretty_exceptions_short,
                  rich_markup_mode=app.rich_markup_mode)
        for info in app.registered_commands:
            n = info.name or tm.get_command_name(info.callback.__name__)
            if n not in self.commands and name in (None, n):
                self.commands[n] = _summary(fast_params(tm.get_command_from_info(info, **kw)))
        for info in app.registered_groups:
            n = info.name if isinstance(info.name, str) else None
            if n is None or (n not in self.commands and name in (None, n)):
                more = ({"suggest_commands": app.suggest_commands}  # typer >= 0.20
                        if hasattr(app, "suggest_commands") else {})
                group = tm.get_group_from_info(info, **kw, **more)
                if group.name and group.name not in self.commands:
                    self.commands[group.name] = _summary(fast_params(group))
        self._order()

    def get_command(self, ctx, cmd_name: str):
        if cmd_name not in self.commands:
            # an unknown name loads everything: the "Did you mean" suggestions of typer's
            # resolve_command read self.commands
            known = cmd_name in COMMAND_MODULES
            load_command_modules([cmd_name] if known else None)
            self._sync(cmd_name if known else None)
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx) -> list[str]:
        load_command_modules()
        self._sync()
        return super().list_commands(ctx)


app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  cls=LazyGroup,
                  help="Exact compute-and-memory accounting for Transformer models.")


@app.callback()
def _group() -> None:
    # No options and no help of its own (the group's help is the Typer's): it keeps typer
    # building a group while fewer than two commands are registered yet.
    pass


def click_exceptions():
    """click's exception classes as typer uses them: typer >= 0.2x vendors its own click,
    older ones use the click package."""
    try:
        from typer._click import exceptions
    except ImportError:  # pragma: no cover
        from click import exceptions
    return exceptions


# -------------------------------------------------------------------------------------------
# Option values without pydantic
# -------------------------------------------------------------------------------------------

# ASCII only: int() and float() also read other scripts' digits ('１２'), pydantic does not
_INT = re.compile(r"[+-]?[0-9]{1,18}")
_FLOAT = re.compile(r"[+-]?(?:[0-9]{1,30}\.?[0-9]{0,30}|\.[0-9]{1,30})(?:[eE][+-]?[0-9]{1,3})?")


def plain_value(annotation, value):
    """``(True, v)``: ``v`` is what typer's pydantic coercion makes of ``value`` for a
    parameter annotated ``annotation`` without constraints; ``(False, None)``: not certain,
    ask pydantic."""
    kind = type(value)
    if annotation is str:
        if kind is str:
            return True, value
    elif annotation is int:
        if kind is int:
            return True, value
        if kind is str and _INT.fullmatch(value):
            return True, int(value)
    elif annotation is float:
        if kind is float and math.isfinite(value):
            return True, value
        if kind is int and abs(value) < 2 ** 53:
            return True, float(value)
        if kind is str and _FLOAT.fullmatch(value):
            v = float(value)
            if math.isfinite(v):
                return True, v
    elif getattr(annotation, "__origin__", None) is list and annotation.__args__ == (str,):
        if kind in (list, tuple) and all(type(v) is str for v in value):
            return True, list(value)
    return False, None


def _plain(descriptor) -> bool:
    """Whether a parameter is one plain_value may answer for: no parser, bounds, file, or
    date formats of typer's."""
    info = descriptor.parameter_info
    return (descriptor.file_annotation is None and getattr(info, "parser", None) is None
            and getattr(info, "min", None) is None and getattr(info, "max", None) is None
            and not getattr(info, "clamp", False))


def _fast_runtime_param_class():
    """A typer RuntimeParam that tries plain_value first and otherwise builds (once) and
    asks typer's own; None where typer has no such layer (then nothing is changed)."""
    try:
        from dataclasses import dataclass, field

        from typer._coercion import RuntimeParam, build_runtime_param
    except ImportError:  # pragma: no cover  (typer without the pydantic layer)
        return None

    @dataclass(frozen=True)
    class FastRuntimeParam(RuntimeParam):
        descriptor: object = None
        _typer: list = field(default_factory=list)

        def _coerce_value(self, value, param, ctx):
            ok, v = plain_value(self.annotation, value)
            if ok:
                return v
            if not self._typer:
                self._typer.append(build_runtime_param(self.descriptor))
            return self._typer[0]._coerce_value(value, param=param, ctx=ctx)

    return FastRuntimeParam


_FAST = _fast_runtime_param_class()


def _fast(p) -> None:
    d = getattr(p, "type_descriptor", None)
    if d is not None and getattr(p, "_runtime_param", "absent") is None and _plain(d):
        p._runtime_param = _FAST(parameter_info=d.parameter_info, annotation=d.annotation,
                                 descriptor=d)


def fast_params(cmd):
    """Give every parameter of ``cmd`` (its --help option, which click makes on first use,
    included) and of its sub-commands the pydantic-free coercion of plain values; returns
    ``cmd``."""
    for sub in getattr(cmd, "commands", {}).values():
        fast_params(sub)
    if _FAST is None or not hasattr(cmd, "get_help_option"):  # pragma: no cover
        return cmd
    for p in getattr(cmd, "params", ()):
        _fast(p)
    made = cmd.get_help_option

    def get_help_option(ctx):
        p = made(ctx)
        if p is not None:
            _fast(p)
        return p

    cmd.get_help_option = get_help_option
    return cmd
