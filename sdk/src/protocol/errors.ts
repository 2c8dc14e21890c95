// The protocol's one error: a request, reply or name that does not fit the protocol, naming the field.

export class WireError extends Error {
  override name = "WireError";
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(`${field}: ${message}`);
  }
}
