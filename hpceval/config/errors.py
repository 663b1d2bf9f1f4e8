"""Config errors that name the key path and the fix (defined in the leaf ``hpceval.errors``, so
the layers below config, the serving engines and container runtimes, raise them too)."""

from __future__ import annotations

from hpceval.errors import ConfigError as ConfigError
from hpceval.errors import ConfigIssue as ConfigIssue
from hpceval.errors import HpcevalError as HpcevalError
from hpceval.errors import one_line as one_line
