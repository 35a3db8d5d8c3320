"""What every layer uses: errors, lazy imports, settings and their domains, the extension
registries, a job's CPU threads."""
