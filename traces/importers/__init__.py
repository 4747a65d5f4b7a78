"""Address traces from the logs memory tracers write (text, Dinero, CSV, Lackey, ChampSim, npy),
parsed in compiled code (:mod:`.textparse`) into the address-trace format."""
