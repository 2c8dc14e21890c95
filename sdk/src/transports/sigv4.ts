// SigV4 for a Function URL with AWS_IAM auth (service "lambda"): the calling role needs
// lambda:InvokeFunctionUrl. @smithy/signature-v4 and @smithy/hash-node are optional peers, loaded only
// when signing is configured.

/** AWS credentials, as @smithy/types' AwsCredentialIdentity (declared here: the types need no optional peer). */
export interface AwsCredentials {
  accessKeyId: string;
  secretAccessKey: string;
  sessionToken?: string;
  expiration?: Date;
}

export interface SigningOptions {
  region: string;
  credentials: AwsCredentials | (() => Promise<AwsCredentials>);
}

export type Signer = (url: URL, headers: Record<string, string>, body: string) => Promise<Record<string, string>>;

export async function sigV4Signer(options: SigningOptions): Promise<Signer> {
  const [{ SignatureV4 }, { Hash }] = await Promise.all([import("@smithy/signature-v4"), import("@smithy/hash-node")]);
  const signer = new SignatureV4({
    service: "lambda",
    region: options.region,
    credentials: options.credentials,
    sha256: Hash.bind(null, "sha256"),
  });
  return async (url, headers, body) => {
    const signed = await signer.sign({
      method: "POST",
      protocol: url.protocol,
      hostname: url.hostname,
      ...(url.port ? { port: Number(url.port) } : {}),
      path: url.pathname,
      query: {},
      headers: { ...headers, host: url.host },
      body,
    });
    return signed.headers as Record<string, string>;
  };
}
