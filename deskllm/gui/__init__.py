"""The desktop GUI: a thin PySide6 layer over the Qt-free core."""
