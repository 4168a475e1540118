"""Without Google ADK installed, ``import opensquilla.session`` works and never imports it,
and importing the integration raises ``ImportError`` naming the extra to install (one
subprocess, ``google.adk`` blocked on ``sys.meta_path``)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import sys

    class NoAdk:
        # Pretends google.adk is not installed: every import of it fails.
        def find_spec(self, name, path=None, target=None):
            if name == "google.adk" or name.startswith("google.adk."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, NoAdk())

    import opensquilla.session
    import opensquilla.session.integrations
    from opensquilla.session import SessionManager, SessionStorage

    print("core", any(name.startswith("google.adk") for name in sys.modules))
    try:
        import opensquilla.session.integrations.google_adk
    except ImportError as exc:
        print(type(exc).__name__, exc)
    else:
        print("imported without google.adk")
    """
)


def test_core_imports_without_adk_and_the_integration_names_the_extra() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    core, guard = done.stdout.strip().splitlines()
    assert core == "core False"
    assert guard.startswith("ImportError Google ADK is not installed")
    assert guard.endswith("install it with: pip install 'opensquilla-session[google-adk]'")
