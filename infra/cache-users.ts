// ElastiCache RBAC for the direct transport's tenants (docs/tenants.md): a user group with the `default` user
// (the functions' own, its password the stack's Redis secret, so they connect as before) and one user per
// tenant named in `cacheTenants`, each with a secret of its own and the access string of
// functions/app/tenant-redis-users.ts: its quota keys, the quota script's commands, nothing else.
import type { RemovalPolicy } from "aws-cdk-lib";
import * as elasticache from "aws-cdk-lib/aws-elasticache";
import * as secretsmanager from "aws-cdk-lib/aws-secretsmanager";
import { Construct } from "constructs";
import { tenantAccessString, tenantUserName } from "../functions/app/tenant-redis-users.ts";
import { DEFAULT_NAMESPACE } from "../sdk/src/protocol/index.ts";
import type { TollgateConfig } from "./config.ts";

export class CacheUsers extends Construct {
  readonly userGroup: elasticache.CfnUserGroup;
  /** Each tenant's password, by the tenant's namespace. */
  readonly tenantSecrets: ReadonlyMap<string, secretsmanager.Secret>;
  /** The ElastiCache user of each secret it holds a password of (the rotation's targets): `default` and each tenant's. */
  readonly usersBySecret: readonly { secret: secretsmanager.ISecret; userId: string; userName: string }[];

  constructor(
    scope: Construct,
    id: string,
    props: { config: TollgateConfig; serviceSecret: secretsmanager.ISecret; removalPolicy: RemovalPolicy },
  ) {
    super(scope, id);
    const { config } = props;
    const prefix = config.name;
    // ElastiCache asks every user group for a user named "default": the functions' (AUTH with the Redis secret)
    const service = new elasticache.CfnUser(this, "Default", {
      engine: config.engine,
      userId: `${prefix}-default`,
      userName: "default",
      accessString: "on ~* +@all",
      authenticationMode: { Type: "password", Passwords: [props.serviceSecret.secretValue.unsafeUnwrap()] },
    });
    const secrets = new Map<string, secretsmanager.Secret>();
    const users = config.cacheTenants.map((tenant) => {
      const secret = new secretsmanager.Secret(this, `Tenant-${tenant}`, {
        description: `Tollgate Redis password of tenant ${tenant}`,
        generateSecretString: { passwordLength: 64, excludePunctuation: true },
        removalPolicy: props.removalPolicy,
      });
      secrets.set(tenant, secret);
      return new elasticache.CfnUser(this, `User-${tenant}`, {
        engine: config.engine,
        userId: `${prefix}-${tenant}`.slice(0, 40),
        userName: tenantUserName(tenant),
        // the functions' KEY_NAMESPACE is the default: the tenants' keys are under <namespace>:t:<tenant>
        accessString: tenantAccessString(DEFAULT_NAMESPACE, tenant),
        authenticationMode: { Type: "password", Passwords: [secret.secretValue.unsafeUnwrap()] },
      });
    });
    this.tenantSecrets = secrets;
    this.usersBySecret = [
      { secret: props.serviceSecret, userId: service.userId, userName: service.userName },
      ...config.cacheTenants.map((tenant, i) => ({
        secret: secrets.get(tenant) as secretsmanager.Secret,
        userId: (users[i] as elasticache.CfnUser).userId,
        userName: tenantUserName(tenant),
      })),
    ];
    this.userGroup = new elasticache.CfnUserGroup(this, "Group", {
      engine: config.engine,
      userGroupId: `${prefix}-users`,
      userIds: [service.userId, ...users.map((user) => user.userId)],
    });
    this.userGroup.addDependency(service);
    for (const user of users) this.userGroup.addDependency(user);
  }
}
