"""rlmesh.launcher: the cluster layer (SSH, node agent, scheduler).

Lives in the top-level ``launcher/`` folder and is installed as ``rlmesh.launcher``.
"""
