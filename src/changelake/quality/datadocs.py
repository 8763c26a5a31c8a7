"""GX Data Docs that work opened as ``file://`` with no network.

GX renders its pages to load jQuery, Bootstrap, Popper, bootstrap-table, Vega and Font Awesome from CDNs
(Bootstrap and Popper with ``integrity`` + ``crossorigin``), its logo from S3 (with the project id in the
query string), and links to its web site. :func:`localize_data_docs` rewrites every page after GX built it:

* each CDN script/style points at a copy under ``static/vendor/`` of the site, copied from the npm packages
  ``infra/datadocs_assets.sh`` fetched (``make setup``), and loses its ``integrity``/``crossorigin``
  attributes: a page opened as ``file://`` has an opaque origin, so a ``crossorigin`` load of a local file
  fails CORS and Chromium blocks the script (``$(...).modal is not a function``);
* the logo (also the one the stylesheets ask for) is GX's own copy in ``static/images/``;
* the favicon path is recomputed per page (GX's is one ``../`` short on validation pages);
* links to GX's web site lose their ``href`` (their text stays): nothing on the page leaves the machine.

Without the npm packages (npm missing) the scripts and styles keep their CDN addresses: the pages then need
internet, and :class:`Localized` says which files were missing so the run can say so.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from changelake.atomic import atomic_copy, atomic_write_text
from changelake.config import CHECKOUT, Settings, load_settings

#: CDN address of each asset Data Docs load -> its file in the npm packages of infra/datadocs_assets.sh.
CDN_ASSETS = {
    "https://code.jquery.com/jquery-3.7.1.min.js": "jquery/dist/jquery.min.js",
    "https://stackpath.bootstrapcdn.com/bootstrap/4.3.1/js/bootstrap.min.js": "bootstrap/dist/js/bootstrap.min.js",
    "https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css": "bootstrap/dist/css/bootstrap.min.css",
    "https://cdnjs.cloudflare.com/ajax/libs/popper.js/1.12.9/umd/popper.min.js": "popper.js/dist/umd/popper.min.js",
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.js": "bootstrap-table/dist/bootstrap-table.min.js",
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.css": "bootstrap-table/dist/bootstrap-table.min.css",
    "https://unpkg.com/bootstrap-table@1.19.1/dist/extensions/filter-control/bootstrap-table-filter-control.min.js":
        "bootstrap-table/dist/extensions/filter-control/bootstrap-table-filter-control.min.js",
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.min.css":
        "bootstrap-table/dist/extensions/filter-control/bootstrap-table-filter-control.min.css",
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.css":
        "bootstrap-table/dist/extensions/filter-control/bootstrap-table-filter-control.css",
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/js/bootstrap-datepicker.min.js":
        "bootstrap-datepicker/dist/js/bootstrap-datepicker.min.js",
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/css/bootstrap-datepicker.min.css":
        "bootstrap-datepicker/dist/css/bootstrap-datepicker.min.css",
    "https://cdn.jsdelivr.net/npm/vega@5": "vega/build/vega.min.js",
    "https://cdn.jsdelivr.net/npm/vega-lite@5": "vega-lite/build/vega-lite.min.js",
    "https://cdn.jsdelivr.net/npm/vega-embed@6": "vega-embed/build/vega-embed.min.js",
    "https://cdn.jsdelivr.net/npm/@forevolve/bootstrap-dark@1.1.0/dist/css/bootstrap-prefers-dark.css":
        "@forevolve/bootstrap-dark/dist/css/bootstrap-prefers-dark.css",
    "https://cdnjs.cloudflare.com/ajax/libs/font-awesome/6.6.0/css/all.min.css": "@fortawesome/fontawesome-free/css/all.min.css",
}  # fmt: skip
#: Font Awesome's stylesheet loads its fonts from ``../webfonts/`` next to it.
WEBFONTS = "@fortawesome/fontawesome-free/webfonts"
#: GX's logos on S3 (the page's ``<img>``, the stylesheets' dark-mode background) -> GX's local copy.
GX_LOGO = re.compile(
    r"https://great-expectations-web-assets\.s3\.[a-z0-9-]+\.amazonaws\.com/[\w.-]+\.png(\?[^\"')\s]*)?"
)
LOCAL_LOGO = "images/logo-long.png"  # under the site's static/
REMOTE = re.compile(r"^(https?:)?//", re.IGNORECASE)
_TAG = re.compile(r"<(script|link|img|a)\b[^>]*>", re.IGNORECASE | re.DOTALL)
_ATTR = re.compile(r"""\s(src|href)\s*=\s*(["'])(.*?)\2""", re.IGNORECASE | re.DOTALL)
_SRI = re.compile(
    r"""\s(integrity|crossorigin)(\s*=\s*(["']).*?\3|\s*=\s*[^\s>]+)?(?=[\s/>])""", re.IGNORECASE
)


def default_assets(settings: Settings | None = None) -> Path:
    """Where ``infra/datadocs_assets.sh`` puts the npm packages (the ``datadocs_assets`` setting,
    ``CHANGELAKE_DATADOCS_ASSETS``, overrides); ``settings`` when the caller has them, else loaded."""
    configured = (settings or load_settings()).datadocs_assets
    return Path(configured) if configured else CHECKOUT / ".venv" / "datadocs-assets" / "node_modules"


@dataclass
class Localized:
    """What :func:`localize_data_docs` did."""

    pages: int = 0  # pages rewritten
    assets: Path | None = None
    missing: list[str] = field(default_factory=list)  # asset files not found: their pages keep the CDN
    remote: dict[str, list[str]] = field(default_factory=dict)  # page -> remote addresses still loaded

    @property
    def offline(self) -> bool:
        return not self.missing and not self.remote


def localize_data_docs(site: Path, assets: Path | None = None) -> Localized:
    """Rewrite the Data Docs pages under ``site`` (and GX's stylesheets) to load nothing from the network.

    ``assets`` is the ``node_modules`` that ``infra/datadocs_assets.sh`` fills (default
    :func:`default_assets`). Idempotent: a page already rewritten is left as it is.
    """
    assets = assets or default_assets()
    result = Localized(assets=assets)
    static = site / "static"
    vendor = static / "vendor"
    result.missing = missing_assets(assets)
    available = {url: rel for url, rel in CDN_ASSETS.items() if rel not in result.missing}
    for relative in sorted(set(available.values())):
        _copy_if_changed(assets / relative, vendor / relative)
    if (assets / WEBFONTS).is_dir():
        for font in sorted((assets / WEBFONTS).iterdir()):
            if font.is_file():
                _copy_if_changed(font, vendor / WEBFONTS / font.name)
    for css in sorted((static / "styles").glob("*.css")) if (static / "styles").is_dir() else []:
        text = css.read_text(encoding="utf-8")
        new = GX_LOGO.sub(f"../{LOCAL_LOGO}", text)
        if new != text:
            atomic_write_text(css, new)
    for page in sorted(site.rglob("*.html")):
        if vendor in page.parents:
            continue
        text = page.read_text(encoding="utf-8")
        to_static = Path(os.path.relpath(static, page.parent)).as_posix()
        new = _rewrite_page(text, to_static, available)
        if new != text:
            atomic_write_text(page, new)
            result.pages += 1
        remote = remote_references(new)
        if remote:
            result.remote[str(page.relative_to(site))] = remote
    return result


def _copy_if_changed(source: Path, target: Path) -> None:
    # A copy cut short by a crash has another size than its source, so it is copied again.
    if target.is_file() and target.stat().st_size == source.stat().st_size:
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_copy(source, target)


def _rewrite_page(text: str, to_static: str, available: dict[str, str]) -> str:
    def tag(match: re.Match) -> str:
        element, original = match.group(1).lower(), match.group(0)
        out = original
        for attr in _ATTR.finditer(original):
            name, quote, value = attr.group(1).lower(), attr.group(2), attr.group(3)
            local = None
            if value in available:
                local = f"{to_static}/vendor/{available[value]}"
            elif GX_LOGO.fullmatch(value):
                local = f"{to_static}/{LOCAL_LOGO}"
            elif name == "href" and value.endswith("static/images/favicon.ico") and not REMOTE.match(value):
                local = f"{to_static}/images/favicon.ico"
            elif element == "a" and name == "href" and REMOTE.match(value):
                out = out.replace(attr.group(0), "")  # a link off the machine: the text stays, the link goes
                continue
            if local is not None:
                out = out.replace(attr.group(0), f" {name}={quote}{local}{quote}")
        if not any(REMOTE.match(a.group(3)) for a in _ATTR.finditer(out)):
            out = _SRI.sub("", out)  # a local file: integrity + crossorigin would make file:// fail CORS
        return out

    text = _TAG.sub(tag, text)
    return GX_LOGO.sub(f"{to_static}/{LOCAL_LOGO}", text)  # the logo in the page's own <style>


def remote_references(html: str) -> list[str]:
    """Every address in ``html`` a browser would fetch or follow off the machine: ``src``/``href`` values and
    CSS ``url(...)`` that are ``http(s)://`` or protocol-relative ``//``."""
    found = [m.group(3) for m in _ATTR.finditer(html) if REMOTE.match(m.group(3).strip())]
    found += [
        m.group(1) for m in re.finditer(r"""url\(\s*["']?([^"')\s]+)""", html) if REMOTE.match(m.group(1))
    ]
    return found


def missing_assets(assets: Path | None = None) -> list[str]:
    """The files of :data:`CDN_ASSETS` (and the Font Awesome fonts) not in ``assets``."""
    assets = assets or default_assets()
    missing = [r for r in sorted(set(CDN_ASSETS.values())) if not (assets / r).is_file()]
    return missing + ([WEBFONTS + "/"] if not (assets / WEBFONTS).is_dir() else [])


def main(argv: list[str] | None = None) -> int:
    """``python -m changelake.quality.datadocs [node_modules]``: exit 1 naming what the Data Docs would
    still load from a CDN (``infra/datadocs_assets.sh`` checks its download with it)."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    assets = Path(args[0]) if args else default_assets()
    missing = missing_assets(assets)
    if missing:
        print(
            f"{assets}: missing {', '.join(missing)}: Data Docs would load these from CDNs", file=sys.stderr
        )
        return 1
    print(f"{assets}: every script, style and font the Data Docs load is here")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
