// cluster-key-slot ships no types: the Redis Cluster hash slot (CRC16 of the key's hash tag, mod 16384).
declare module "cluster-key-slot" {
  export default function calculateSlot(key: string | Buffer): number;
}
