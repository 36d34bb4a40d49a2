"""The ``pacs-rl`` command. Each sub-command lives next to the code it drives (``<package>/cli.py``) and
imports the heavy libraries (torch, transformers, TRL) only when it runs, so ``pacs-rl --help`` stays fast."""

from __future__ import annotations

import importlib.metadata as md

import typer

from pacs_rl import __version__
from pacs_rl import device as devices
from pacs_rl.command import Command, Group
from pacs_rl.compare import cli as compare_cli
from pacs_rl.evaluation.cli import audit_command, eval_command
from pacs_rl.models import BUNDLED_MODELS, bundled_gguf_path, cache_dir
from pacs_rl.training.cli import train_command
from pacs_rl.training.schema import known_keys, loss_type_names, setting_type

app = typer.Typer(
    name="pacs-rl",
    help="Post-train language models with PACS and RLVR baselines; evaluate them with pass@k.",
    cls=Group,
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
    pretty_exceptions_show_locals=False,
)


@app.callback()
def _root() -> None:
    """Post-train language models with PACS and RLVR baselines; evaluate them with pass@k."""


@app.command()
def info() -> None:
    """Print versions, the bundled model's status, and the device `pacs-rl train` uses here and why."""
    typer.echo(f"pacs-rl {__version__}")
    for dist in ("torch", "transformers", "trl", "accelerate", "math-verify", "vllm", "verl"):
        try:
            typer.echo(f"  {dist}: {md.version(dist)}")
        except md.PackageNotFoundError:
            typer.echo(f"  {dist}: not installed")
    for name in BUNDLED_MODELS:
        try:
            typer.echo(f"  bundled model {name}: {bundled_gguf_path(name)}")
        except FileNotFoundError as e:
            typer.echo(f"  bundled model {name}: {e}")
    typer.echo(f"  cache: {cache_dir()}")
    try:
        from pacs_rl.sampling.transformers_backend import cpu_capability

        typer.echo(f"  CPU: {cpu_capability()}")
        cuda = devices.cuda_info()
        if cuda.available:
            memory = f"{cuda.memory_gib:.1f} GiB" if cuda.memory_gib else "memory unknown"
            typer.echo(f"  CUDA: {cuda.name or 'device 0'}, {memory}, {cuda.count} visible, bf16 {cuda.bf16}")
        else:
            built = (
                f"torch built for CUDA {cuda.torch_cuda}" if cuda.torch_cuda else "this torch is a CPU build"
            )
            typer.echo(f"  CUDA: none visible ({built})")
        typer.echo(f"  pacs-rl train runs on: {devices.choose_device({}, cuda).line()}")
    except ImportError as e:  # no torch: the versions above say so
        typer.echo(f"  CPU: unknown ({e})")


class _RegistryHelp(Command):
    """A command whose option help may name the registered losses: ``{losses}`` is filled in when the help is
    shown (from names that need no torch)."""

    def format_help(self, ctx, formatter):
        names = {"losses": ", ".join(loss_type_names())}
        for param in self.params:
            if getattr(param, "help", None) and "{" in param.help:
                param.help = param.help.format(**names)
        return super().format_help(ctx, formatter)


class _TrainCommand(_RegistryHelp):
    """`pacs-rl train`: every setting is an option too (``--learning_rate 1e-5``, TRL's spelling)."""

    @property
    def settings(self):  # type: ignore[override]
        return {k: setting_type(k) for k in known_keys()}


app.command("eval", cls=Command)(eval_command)
app.command("train", cls=_TrainCommand)(train_command)
app.add_typer(compare_cli.app, name="compare")
app.command("audit", cls=Command)(audit_command)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
