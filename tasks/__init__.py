"""Small typed steps of the pipeline (pure functions and Prefect tasks) composed by flows/."""
