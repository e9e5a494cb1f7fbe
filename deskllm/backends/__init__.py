"""Model names and what answers them, for every face: the resolver turns a name (`auto`,
NAME/MODEL, */MODEL, an installed model's name, a path) into a ChatBackend or a local file,
and the routing helpers calibrate the router. Qt-free; the CLI, the GUI, the server and
bench/ all resolve through here."""

from deskllm.backends.names import AUTO, POOL, ModelName, NameKind, parse_name
from deskllm.backends.resolver import Resolver

__all__ = ["AUTO", "POOL", "ModelName", "NameKind", "Resolver", "parse_name"]
