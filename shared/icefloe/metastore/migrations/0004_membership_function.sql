-- Query planning evaluates each live file's statistics in the meta store (see
-- icefloe.metastore.file_filter). The membership filters of the row-group key are Bloom
-- filters written by icefloe.membership as "<hashes>:<bits>:<base64 bit array>"; this function
-- answers, for one file's filter, whether any of some values may be among the file's keys.
-- ``hash_pairs`` holds two numbers per value (the value's double-hashing pair), flattened.
-- It returns false only when the filter proves every value absent; a filter in another format
-- proves nothing.

CREATE FUNCTION membership_may_contain(filter text, hash_pairs numeric[])
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    parts text[];
    bits bigint;
    bit_array bytea;
    pair integer;
    probe integer;
    present boolean;
BEGIN
    IF filter !~ '^7:[0-9]{1,9}:[A-Za-z0-9+/]*={0,2}$' THEN
        RETURN true;
    END IF;
    parts := string_to_array(filter, ':');
    bits := parts[2]::bigint;
    IF bits = 0 OR length(parts[3]) % 4 <> 0 THEN
        RETURN true;
    END IF;
    bit_array := decode(parts[3], 'base64');
    IF length(bit_array)::bigint * 8 <> bits THEN
        RETURN true;
    END IF;
    FOR pair IN 0 .. coalesce(array_length(hash_pairs, 1), 0) / 2 - 1 LOOP
        present := true;
        FOR probe IN 0 .. 6 LOOP
            IF get_bit(
                bit_array,
                ((hash_pairs[2 * pair + 1] + probe * hash_pairs[2 * pair + 2]) % bits)::integer
            ) = 0 THEN
                present := false;
                EXIT;
            END IF;
        END LOOP;
        IF present THEN
            RETURN true;
        END IF;
    END LOOP;
    RETURN false;
END
$$;
