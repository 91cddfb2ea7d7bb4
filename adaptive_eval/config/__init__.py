"""The config: its schema (:mod:`.schema`), the hardened YAML reader (:mod:`.reader`), the
typed settings a campaign resolves it into once (:mod:`.settings`) and the registry of the
plug-ins it names (:mod:`.registry`)."""
