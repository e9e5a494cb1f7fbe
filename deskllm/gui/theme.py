"""Light / dark: follow the system, or force one. Widgets use palette roles only, so a palette
change restyles everything without a restart."""

from __future__ import annotations

from deskllm.gui.qt import QApplication, QColor, QPalette, Qt

_SCHEMES = {"light": Qt.ColorScheme.Light, "dark": Qt.ColorScheme.Dark}


def apply_theme(app: QApplication, theme: str) -> None:
    """Ask the platform for the colour scheme; where it cannot switch (some Linux desktops,
    the offscreen platform), fall back to a palette derived from one window colour."""
    wanted = _SCHEMES.get(theme, Qt.ColorScheme.Unknown)
    hints = app.styleHints()
    hints.setColorScheme(wanted)  # Unknown: follow the system again
    if theme not in _SCHEMES or hints.colorScheme() == wanted:
        app.setPalette(readable_links(QPalette()))  # the platform's own (drops a fallback)
        return
    app.setPalette(fallback_palette(dark=theme == "dark"))


def readable_links(palette: QPalette) -> QPalette:
    """Links light enough to read on a dark window: some platforms' dark palettes keep the
    light theme's dark blue (a banner's link was dark blue on dark grey)."""
    R = QPalette.ColorRole
    if is_dark(palette) and palette.color(R.Link).lightness() < 150:
        palette.setColor(R.Link, QColor(0x6C, 0xB4, 0xFF))
        palette.setColor(R.LinkVisited, QColor(0xB4, 0x9C, 0xFF))
    return palette


def is_dark(palette: QPalette) -> bool:
    return palette.color(QPalette.ColorRole.Window).lightness() < 128


def fallback_palette(dark: bool) -> QPalette:
    # Qt derives every shade and the text colours from the window colour; links, placeholder
    # text and the text field background need a nudge to stay readable.
    R = QPalette.ColorRole
    if not dark:
        palette = QPalette(QColor(0xEF, 0xEF, 0xEF))
        palette.setColor(R.Base, QColor(0xFF, 0xFF, 0xFF))
        palette.setColor(R.PlaceholderText, QColor(0x70, 0x70, 0x70))
        return palette
    palette = QPalette(QColor(0x3A, 0x3A, 0x3A), QColor(0x2B, 0x2B, 0x2B))
    palette.setColor(R.Base, QColor(0x1E, 0x1E, 0x1E))
    palette.setColor(R.AlternateBase, QColor(0x26, 0x26, 0x26))
    palette.setColor(R.Link, QColor(0x6C, 0xB4, 0xFF))
    palette.setColor(R.LinkVisited, QColor(0xB4, 0x9C, 0xFF))
    palette.setColor(R.Highlight, QColor(0x2F, 0x6F, 0xB8))
    palette.setColor(R.HighlightedText, QColor(0xFF, 0xFF, 0xFF))
    palette.setColor(R.PlaceholderText, QColor(0xA0, 0xA0, 0xA0))
    palette.setColor(R.ToolTipBase, QColor(0x3A, 0x3A, 0x3A))
    palette.setColor(R.ToolTipText, QColor(0xF0, 0xF0, 0xF0))
    disabled = QPalette.ColorGroup.Disabled
    for role in (R.Text, R.WindowText, R.ButtonText):
        palette.setColor(disabled, role, QColor(0x80, 0x80, 0x80))
    return palette
