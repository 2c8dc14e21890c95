  -- store-epoch.lua (statements of capSends(), after beginCall(), before anything is read or written):
  -- KEYS[2], when the caller declares it, is the epoch key of this call's hash slot
  -- (sdk/src/protocol/keys-store-epoch.ts), written when the store was initialised. Gone, the slot's state
  -- was lost since: the call counts nothing and answers "STORELOST <key>" (the caller's onStoreLoss decides).
  if keys[2] ~= nil and redis.call('EXISTS', keys[2]) == 0 then
    return redis.error_reply('STORELOST ' .. keys[2])
  end
