"""libs.redaction: URL user information, configured secrets and common key shapes are masked; the
start-up settings line (`ServiceSettings.masked`) shows credentialed URLs redacted."""

from __future__ import annotations

from libs.redaction import MASK, redact, redact_url_credentials
from libs.settings import ServiceSettings


def test_url_credentials_are_masked_whatever_the_scheme():
    assert redact_url_credentials("https://user:pass@host:8/v1") == f"https://{MASK}@host:8/v1"
    assert redact_url_credentials("redis://:s3cret@redis:6379/0") == f"redis://{MASK}@redis:6379/0"
    assert redact_url_credentials("mail me@example.org, see https://host/a@b") == \
        "mail me@example.org, see https://host/a@b"


def test_configured_secrets_and_key_shapes_are_masked():
    text = ("key 0123456789abcdef echoed; Authorization: Bearer abcdefghijklmnop; "
            "sk-proj-ABCDEFGHIJKL; {\"api_key\": \"zzzzzzzzzz\"}")
    out = redact(text, ["0123456789abcdef"])
    for secret in ("0123456789abcdef", "abcdefghijklmnop", "sk-proj-ABCDEFGHIJKL", "zzzzzzzzzz"):
        assert secret not in out
    assert out.startswith(f"key {MASK} echoed")


def test_the_settings_line_masks_urls_with_credentials():
    masked = ServiceSettings(otel_exporter_otlp_endpoint="http://user:pw@jaeger:4317").masked()
    assert masked["otel_exporter_otlp_endpoint"] == f"http://{MASK}@jaeger:4317"
    assert ServiceSettings(mesh_token="x" * 20).masked()["mesh_token"] == "**********"
