"""MkDocs hook: publish the repository's ``figures/*.png`` (made by ``studies/``) at ``figures/`` in the site,
so pages link them as ``../figures/NAME.png`` and ``mkdocs build --strict`` checks those links."""

from pathlib import Path

from mkdocs.structure.files import File


def on_files(files, config):
    root = Path(config["config_file_path"]).resolve().parent
    for png in sorted((root / "figures").glob("*.png")):
        files.append(File.generated(config, f"figures/{png.name}", abs_src_path=str(png)))
    return files
