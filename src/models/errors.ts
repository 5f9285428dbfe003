/** The registry has no such model (or no tag of it), or it is not a model a rented GPU can serve. → 400 */
export class ModelNotFoundError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ModelNotFoundError";
  }
}

/** The registry did not answer usefully: down, 5xx, timed out, or an answer we cannot read. → 502 */
export class RegistryUnavailableError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "RegistryUnavailableError";
  }
}
