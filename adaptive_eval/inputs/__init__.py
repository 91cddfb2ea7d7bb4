"""Input files: read only when regular and never past a bound (:mod:`.bounded`), validated
``.npz`` arrays (:mod:`.npz`) and question sets (:mod:`.datasets`)."""
