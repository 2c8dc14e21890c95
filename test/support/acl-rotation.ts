// An ACL user on every node of the local cluster, with the steps of an ElastiCache AUTH rotation:
// ROTATE (a second password accepted beside the first), SET (only the new one), and the connections
// dropped, as a failover or a node replacement drops them: every client opens its connections anew.
import { once } from "node:events";
import { type Cluster, Redis } from "ioredis";
import { clusterPorts } from "./cluster.ts";

export class AclUser {
  private constructor(
    readonly name: string,
    private readonly nodes: Redis[],
  ) {}

  /** `name` with `password`, allowed every key and command, on all six nodes (ACLs are per node). */
  static async create(name: string, password: string): Promise<AclUser> {
    const nodes = clusterPorts.map((port) => new Redis({ host: "127.0.0.1", port }));
    const user = new AclUser(name, nodes);
    await user.each("ACL", "SETUSER", name, "reset", "on", `>${password}`, "~*", "&*", "+@all");
    return user;
  }

  /** ROTATE: `password` is accepted too. */
  addPassword(password: string): Promise<void> {
    return this.each("ACL", "SETUSER", this.name, `>${password}`);
  }

  /** SET: `password` is no longer accepted. */
  removePassword(password: string): Promise<void> {
    return this.each("ACL", "SETUSER", this.name, `<${password}`);
  }

  /**
   * Closes every connection of the user, on every node, and waits until `client` has seen its open
   * connections to the primaries close: a command sent before that would meet a closed socket (no answer, may have run),
   * which is a dropped connection's failure, not the rotation's.
   */
  async dropConnections(client: Cluster): Promise<void> {
    const open = client.nodes("master").filter((node) => node.status === "ready");
    const closed = Promise.all(open.map((node) => once(node, "end")));
    await this.each("CLIENT", "KILL", "USER", this.name);
    await closed;
  }

  async remove(): Promise<void> {
    await this.each("ACL", "DELUSER", this.name);
    for (const node of this.nodes) node.disconnect();
  }

  private async each(...command: [string, ...string[]]): Promise<void> {
    await Promise.all(this.nodes.map((node) => node.call(...command)));
  }
}
