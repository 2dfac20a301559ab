"""The web UI's settings from the `web:` section of pgfleet.yaml, for the supervisor's
web child and for `pgfleet check`."""

from __future__ import annotations

from pathlib import Path

from pgfleet.config import Config
from pgfleet.web.settings import Labels, WebSettings, build_settings


def from_config(config: Config, dsn: str) -> WebSettings:
    """Settings of the `web:` section; errors name the file and line of the key. A
    relative secret file is found beside the config file, wherever the supervisor runs."""
    web = config.web
    folder = Path(config.source).parent
    labels = Labels(listen=config.where("web", "listen"),
                    token_file=config.where("web", "token_file"),
                    basic_auth_file=config.where("web", "basic_auth_file"),
                    viewer_token_file=config.where("web", "viewer_token_file"),
                    tls_cert=config.where("web", "tls_cert"),
                    tls_key=config.where("web", "tls_key"),
                    behind_proxy=config.where("web", "behind_proxy"))
    return build_settings(
        web.listen, dsn, web.read_only,
        folder / web.token_file if web.token_file else None,
        folder / web.basic_auth_file if web.basic_auth_file else None, labels,
        behind_proxy=web.behind_proxy,
        tls_cert=folder / web.tls_cert if web.tls_cert else None,
        tls_key=folder / web.tls_key if web.tls_key else None,
        viewer_token_file=folder / web.viewer_token_file if web.viewer_token_file else None)
