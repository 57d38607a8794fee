"""Hand-written SQL over ``resources`` for hot paths, in psycopg's ``%(name)s`` style (through
``Connection.exec_driver_sql``). The ORM models stay in ``models.resources``; a statement lives
here when the ORM would load what the path does not need (a WorkerVersion's ``spec`` holds its
modules' source).
"""

from __future__ import annotations

#: What decides whether DurableWorkflow ``%(uid)s`` accepts new instances, in one statement: at
#: most one row ``(class_name, deployment_uid, deployment_name, applied, versions)``. No row: no
#: such resource. ``deployment_uid`` NULL: its Worker has no live Deployment that is not being
#: deleted. ``applied`` is the Deployment's ``observed.versions`` (json, may be NULL);
#: ``versions`` a json array of ``{uid, name, phase, validated, classes}`` of the resources the
#: applied allocation names that exist (NULL when there are none); Versions' specs are not read.
WORKFLOW_READINESS = """
WITH wf AS (
  SELECT name, worker_uid, spec->>'className' AS class_name FROM resources WHERE uid = %(uid)s
), dep AS (
  SELECT d.uid, d.name, d.observed->'versions' AS applied
  FROM resources d JOIN wf ON d.worker_uid = wf.worker_uid
  WHERE d.form = 'WorkerDeployment' AND d.deleted_at IS NULL AND d.phase <> 'deleting'
  LIMIT 1
)
SELECT wf.name, wf.class_name, dep.uid, dep.name, dep.applied,
  (SELECT json_agg(json_build_object(
            'uid', v.uid, 'name', v.name, 'phase', v.phase,
            'validated', v.observed->'validated', 'classes', v.observed->'workflowClasses'))
   FROM resources v
   WHERE json_typeof(dep.applied) = 'array'
     AND v.uid IN (SELECT e->'version'->>'resourceUid' FROM json_array_elements(dep.applied) e))
FROM wf LEFT JOIN dep ON true
"""
