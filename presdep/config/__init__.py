"""The workflow config: validated against its closed schema, then frozen into typed records.

The config says WHAT to run (datasets, models, variants, protocol); profiles say WHERE.
Three rules keep a run honest about what it measures:

- every object of ``presdep/config/schema.yaml`` (:data:`SCHEMA_PATH`) is closed, so a misspelt key stops
  the workflow before any job runs, with the key's YAML path and the closest valid name;
- every default lives in the schema only: :func:`validate_config` fills them in while it
  validates, and nothing downstream restates one;
- rules and library read :class:`WorkflowConfig` (frozen records built once from the
  validated dict), so no layer re-derives a setting another layer already resolved.

Snakemake merges a ``--configfile`` recursively into the embedded default; for
``datasets`` and ``variants`` that would ADD a user's entries to the default's, so
:func:`apply_replacing_sections` lets a user file's sections replace them.
"""

from presdep.config.load import (
    REPLACING_SECTIONS,
    SCHEMA_PATH,
    apply_replacing_sections,
    hosted_defaults,
    load_workflow_config,
    schema_defaults,
    validate_config,
)
from presdep.config.records import (
    Dataset,
    Protocol,
    ReadCache,
    Student,
    Teacher,
    Variant,
    WorkflowConfig,
    thaw,
)
from presdep.config.yaml_io import load_yaml
from presdep.contracts.errors import ConfigError
from presdep.contracts.tasks import TASKS

__all__ = [
    "REPLACING_SECTIONS", "SCHEMA_PATH", "TASKS", "ConfigError", "Dataset", "Protocol", "ReadCache", "Student",
    "Teacher", "Variant", "WorkflowConfig", "apply_replacing_sections", "hosted_defaults", "load_workflow_config",
    "load_yaml", "schema_defaults", "thaw", "validate_config",
]
