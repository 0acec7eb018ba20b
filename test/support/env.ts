// Keep every AWS SDK and lancedb code path on loopback: no credential chain, no instance metadata.
import { keepOnLoopback } from "../../local/loopback.js";

keepOnLoopback();
