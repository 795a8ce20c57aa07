"""``gpuscale-load replay``: an arrival trace replayed in virtual time through replicas of ``serve``'s engine, the
metric pipeline as deployed and the HPA's and KEDA's algorithms, policy by policy, against the clairvoyant bound."""
