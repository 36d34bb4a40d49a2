"""The ``pacs-rl`` command. Each sub-command lives next to the code it drives and imports its heavy
dependencies (torch, transformers) inside the function, so ``pacs-rl --help`` stays instant."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="pacs-rl",
    help="Post-train language models with PACS and RLVR baselines; evaluate them with pass@k.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)


@app.callback()
def _root() -> None:
    """Post-train language models with PACS and RLVR baselines; evaluate them with pass@k."""


@app.command()
def info() -> None:
    """Print versions and the bundled model's status."""
    import importlib.metadata as md

    from pacs_rl import __version__
    from pacs_rl.models import BUNDLED_MODELS, bundled_gguf_path, cache_dir

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


def _register() -> None:
    """Attach the sub-commands that exist. Each module defines a plain function with typer options."""
    import importlib

    for name, target in [
        ("eval", "pacs_rl.evaluation.cli:eval_command"),
        ("train", "pacs_rl.training.cli:train_command"),
        ("compare", "pacs_rl.compare:compare_command"),
    ]:
        module_name, func_name = target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name and e.name.startswith("pacs_rl"):
                continue  # that part of the package is not built yet
            raise
        app.command(name)(getattr(module, func_name))


_register()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
